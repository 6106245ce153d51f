"""The target contract (silvanforge.target, silvanforge.runtime.kernel): a third-party target written as
a class compiles and predicts through the Kernel protocol alone, the shipped targets' kernels
implement the protocol, and classes or kernels that break the contract are named."""

from __future__ import annotations

import numpy as np
import pytest
from strategies import make_forest, rows_for
from support_common import without_opencl
from support_plugins import target_module

import silvanforge as sf
from silvanforge import testing
from silvanforge.errors import PluginError
from silvanforge.ir import lir
from silvanforge.plugins import registry
from silvanforge.runtime import reference
from silvanforge.runtime.kernel import Kernel, PhaseKernel
from silvanforge.target import Target


class RelayKernel(PhaseKernel):
    """A kernel of its own whose phases call another kernel's functions, counting them: what
    the compiled model asks of it is the protocol alone (no lean path, no artifact)."""

    def __init__(self, inner, runs: list):
        self.module, self.input_dtype, self.output_dtype = inner.module, inner.input_dtype, inner.output_dtype
        self.phases, self.scratch = inner.phases, inner.scratch
        self._inner, self._runs = inner, runs

    def run(self, phase, rows, out, scratch, row_begin, row_end, iter_begin=0, iter_end=0):
        self._runs.append(phase)
        self._inner.run(phase, rows, out, scratch, row_begin, row_end, iter_begin, iter_end)


class Relay(Target):
    """A third-party target ``relay``: the default schedule, the core's lowering and source,
    kernels of its own (:class:`RelayKernel`) around the cpu target's machine code."""

    name = "relay"
    runs: list = []
    compiles: list = []

    def compile(self, module, options):
        self.compiles.append(options)
        return RelayKernel(registry().target("cpu").compile(module, options), self.runs)


@pytest.fixture
def installed():
    """Registers target plugin modules into the process registry for one test."""
    reg, added = registry(), []

    def add(*classes):
        mod = target_module(f"sf_test_targets_{len(added)}", *classes)
        reg.register(mod, name=mod.__name__)
        added.append(mod.__name__)

    yield add
    for name in added:
        registry().pm.unregister(name=name)


def test_a_third_party_target_class_compiles_and_predicts_through_the_protocol(installed, tmp_path):
    installed(Relay)
    Relay.runs.clear()
    Relay.compiles.clear()
    reg = registry()
    assert "relay" in reg.targets() and reg.target("relay") is reg.target("relay")
    assert reg.target_kind("relay") == "cpu" and reg.target_available("relay") == (True, "")
    forest = make_forest(seed=3)
    X = rows_for(forest, np.random.default_rng(0), 300)
    cf = sf.compile(forest, target="relay", rep="sparse", threads=2)
    assert isinstance(cf.kernel, RelayKernel) and isinstance(cf.kernel, Kernel)
    want = reference.predict(forest, X, output_margin=True)
    for n in (0, 1, 5, 300):  # no lean path: one row goes through margins too
        Relay.runs.clear()
        np.testing.assert_array_equal(cf.predict(X[:n], output_margin=True), want[:n])
        assert bool(Relay.runs) == (n > 0)
    # Its source is the LIR as printed (the base's), its default schedule the canned default.
    assert sf.show(forest, "target", target="relay", rep="sparse") == lir.format_module(cf.lir_module)
    # No artifact: a saved model compiles again when loaded, through the target's compile.
    path = tmp_path / "m.forge"
    cf.save(path)
    before = len(Relay.compiles)
    back = sf.load_compiled(path, trust_code=True)
    assert len(Relay.compiles) == before + 1 and back.target == "relay"
    np.testing.assert_array_equal(back.predict(X, output_margin=True), want)
    # The conformance kit takes it as it takes the shipped targets.
    assert testing.check_target("relay", reps=["sparse"], seeds=range(2)).cases >= 2


class Unrunnable(Target):
    name = "unrunnable"

    def can_run_here(self):
        return False, "needs a machine that is not this one"

    def compile(self, module, options):
        raise AssertionError("never compiled")


def test_a_target_that_cannot_run_here_says_why(installed):
    installed(Unrunnable)
    assert registry().target_available("unrunnable") == (False, "needs a machine that is not this one")
    with pytest.raises(PluginError, match="cannot run on this machine: needs a machine"):
        sf.compile(make_forest(seed=3), target="unrunnable")
    # generating code needs no machine
    assert "predict_0" in sf.show(make_forest(seed=3), "target", target="unrunnable", rep="sparse")


def test_a_kernel_that_breaks_the_protocol_is_named(installed):
    class Careless(Target):
        name = "careless"

        def compile(self, module, options):
            return object()

    installed(Careless)
    with pytest.raises(PluginError, match=r"target 'careless' returned object, not a silvanforge.runtime.kernel.Kernel "
                                          r"\(it lacks module, input_dtype, output_dtype, margins"):
        sf.compile(make_forest(seed=3), target="careless")


@pytest.mark.parametrize("listed, message", [
    (object, "is not a silvanforge.target.Target subclass"),
    (type("Nameless", (Target,), {"compile": lambda self, m, o: None}), "has no name"),
    (type("Uncompiling", (Target,), {"name": "uncompiling"}), "'uncompiling' .* does not implement compile"),
    (type("Odd", (Target,), {"name": "odd", "kind": "tpu", "compile": lambda self, m, o: None}),
     "kind 'tpu', not cpu or gpu"),
])
def test_a_target_class_that_breaks_the_contract_is_a_plugin_error(installed, listed, message):
    installed(listed)
    with pytest.raises(PluginError, match=message):
        registry().targets()


def test_an_unknown_target_names_the_installed_ones():
    with pytest.raises(PluginError, match="unknown target 'nonesuch'; installed: .*cpu"):
        registry().target("nonesuch")
    assert registry().target_available("nonesuch")[0] is False


def _check_kernel(kernel, lean: bool, saved: bool) -> None:
    """The protocol's members, with the optional capabilities answered, not left out."""
    assert isinstance(kernel, Kernel)
    assert isinstance(kernel.module, lir.Module)
    assert np.dtype(kernel.input_dtype).kind == np.dtype(kernel.output_dtype).kind == "f"
    assert (kernel.small_calls(4, None, False) is not None) == lean
    blob = kernel.artifact()
    assert isinstance(blob, bytes) and bool(blob) == saved
    rows = np.zeros((3, kernel.module.num_features), kernel.input_dtype)
    assert kernel.margins(rows, kernel.module.num_outputs, 1).shape == (3, kernel.module.num_outputs)


def test_the_cpu_kernel_implements_the_protocol():
    _check_kernel(sf.compile(make_forest(seed=3)).kernel, lean=True, saved=True)


def test_the_amd_kernel_implements_the_protocol():
    ok, why = registry().target_available("amd")
    if not ok:
        without_opencl(why)
    _check_kernel(sf.compile(make_forest(seed=3), target="amd").kernel, lean=False, saved=False)
