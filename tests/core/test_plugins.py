"""Plugin discovery: what ships here is found with its distribution and version, a broken
third-party plugin is reported and not fatal, and the unimplemented plugins say so."""

from __future__ import annotations

import sys
import types
from importlib import metadata

import pytest
from support_common import REPOSITORY as ROOT
from support_plugins import target_module

import silvanforge as sf
from silvanforge import cli, hookimpl, plugins
from silvanforge.errors import PluginError

SHIPPED = {
    ("silvanforge.importers", "xgboost"): "silvanforge-importer-xgboost",
    ("silvanforge.importers", "lightgbm"): "silvanforge-importer-lightgbm",
    ("silvanforge.importers", "onnx"): "silvanforge-importer-onnx",
    ("silvanforge.importers", "all"): "silvanforge-importers",
    ("silvanforge.representations", "array"): "silvanforge-rep-array",
    ("silvanforge.representations", "sparse"): "silvanforge-rep-sparse",
    ("silvanforge.representations", "reorg"): "silvanforge-rep-reorg",
    ("silvanforge.representations", "bitvector"): "silvanforge-rep-bitvector",
    ("silvanforge.representations", "oblivious"): "silvanforge-rep-oblivious",
    ("silvanforge.targets", "cpu"): "silvanforge-target-cpu",
    ("silvanforge.targets", "cuda"): "silvanforge-target-cuda",
    ("silvanforge.targets", "amd"): "silvanforge-target-amd",
}


def test_shipped_plugins_are_discovered_with_distribution_and_version():
    reg = plugins.PluginRegistry()
    found = {(r.group, r.name): r for r in reg.records}
    for key, dist in SHIPPED.items():
        assert key in found, f"{dist} is not installed (pip install -r requirements.txt)"
        rec = found[key]
        assert rec.error is None, rec.error
        assert rec.distribution == dist
        assert rec.version == metadata.version(dist)
    assert found[("silvanforge.importers", "xgboost")].provides == ["xgboost-json", "xgboost-ubjson"]
    assert found[("silvanforge.importers", "onnx")].provides == ["onnx"]
    assert found[("silvanforge.importers", "all")].provides == []  # the members provide the formats
    assert found[("silvanforge.targets", "cpu")].provides == ["cpu"]
    assert set(reg.targets()) >= {"cpu", "cuda", "amd"}
    assert set(reg.representations()) >= {"array", "sparse"}


def _bad_module():
    mod = types.ModuleType("sf_test_bad_hook_plugin")

    @hookimpl
    def silvanforge_targets(name):  # the spec takes no argument
        return []

    mod.silvanforge_targets = silvanforge_targets
    return mod


@pytest.fixture
def broken_plugins(monkeypatch):
    """Two third-party plugins: one that fails to import, one whose hook has a wrong argument."""
    monkeypatch.setitem(sys.modules, "sf_test_bad_hook_plugin", _bad_module())
    extra = {
        "silvanforge.targets": [
            metadata.EntryPoint(name="bad-hook", value="sf_test_bad_hook_plugin", group="silvanforge.targets"),
        ],
        "silvanforge.representations": [
            metadata.EntryPoint(name="no-module", value="sf_test_module_that_does_not_exist",
                                group="silvanforge.representations"),
        ],
    }
    real = metadata.entry_points

    def entry_points(**kw):
        group = kw.get("group")
        return list(real(**kw)) + extra.get(group, [])

    monkeypatch.setattr(plugins.metadata, "entry_points", entry_points)
    return plugins.PluginRegistry()


def test_broken_plugins_are_reported_not_fatal(broken_plugins):
    reg = broken_plugins
    by_name = {r.name: r for r in reg.records}
    assert "PluginValidationError" in by_name["bad-hook"].error
    assert "ModuleNotFoundError" in by_name["no-module"].error
    assert "bad-hook" not in reg.targets()
    # everything else still works
    assert "cpu" in reg.targets() and by_name["cpu"].error is None
    assert reg.target_available("cpu") == (True, "")


def test_forge_plugins_shows_broken_plugins(broken_plugins, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setattr(plugins, "_registry", broken_plugins)
    code = cli.main(["plugins"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "bad-hook" in out and "no-module" in out and "broken" in out
    assert "PluginValidationError" in out and "silvanforge-target-cpu" in out


@pytest.mark.parametrize("target", ["cuda", "amd"])
def test_gpu_targets_are_gpu_kind_and_say_why_they_cannot_run(target):
    """Where a GPU target runs here it compiles and predicts what the reference does (and the
    amd target must run where CI provides OpenCL: SILVANFORGE_REQUIRE_OPENCL); where it does not,
    it says why and is refused with that reason."""
    import os

    import numpy as np

    from silvanforge.runtime import reference
    from silvanforge.testing import random_forest, rows_for

    reg = plugins.registry()
    assert target in reg.targets()
    assert reg.target_kind(target) == "gpu" and reg.target_kind("cpu") == "cpu"
    ok, why = reg.target_available(target)
    if target == "amd" and os.environ.get("SILVANFORGE_REQUIRE_OPENCL", "") not in ("", "0"):
        assert ok, why
    if ok:
        reg.check_target(target)
        forest = random_forest(3, max_trees=4, max_depth=4, summed=True)
        X = rows_for(forest, np.random.default_rng(3), 20)
        np.testing.assert_allclose(sf.compile(forest, target=target).predict(X, output_margin=True),
                                   reference.predict(forest, X, output_margin=True), rtol=1e-6, atol=1e-6)
        return
    assert why
    with pytest.raises(PluginError, match="cannot run"):
        reg.check_target(target)


def test_cuda_reason_names_what_is_missing():
    import silvanforge_target_cuda as cuda

    reasons = cuda.problems()
    try:
        import pycuda  # noqa: F401
    except ImportError:
        assert any("pycuda is not installed" in r for r in reasons)
    if cuda.find_nvcc() is None:
        assert any("nvcc" in r for r in reasons)


def test_reorg_is_discovered_and_provides_reorg(tmp_path):
    reg = plugins.registry()
    rec = next(r for r in reg.records if r.name == "reorg")
    assert rec.error is None and rec.provides == ["reorg"]
    assert "reorg" in reg.representations()
    reg.check_representation("reorg")
    with pytest.raises(PluginError, match="unknown representation 'nonesuch'"):
        reg.check_representation("nonesuch")


def test_shipped_hooks_match_the_specs():
    """pluggy validates each shipped plugin against the specs on a fresh manager."""
    import silvanforge_rep_reorg
    import silvanforge_target_amd
    import silvanforge_target_cuda

    reg = plugins.PluginRegistry(discover=False)
    for mod in (silvanforge_target_cuda, silvanforge_target_amd, silvanforge_rep_reorg):
        reg.register(mod, name=mod.__name__)
    assert set(reg.targets()) == {"cuda", "amd"}
    assert reg.representations() == ["reorg"]
    assert sf.hookimpl is hookimpl


def _program_rep(name: str, cost):
    """A third-party program representation that evaluates like bitvectors under its own name,
    offering ``cost`` (None: refusing, with a reason)."""
    from silvanforge_rep_bitvector import bitvector

    from silvanforge.rep import ProgramRepresentation

    class Form(ProgramRepresentation):
        @classmethod
        def cost(cls, forest, target_kind, batch_size):
            return cost if cost is not None else "not for this forest"

        def program(self, forest, target_kind, batch_size):
            return bitvector.lower(forest, batch_size=batch_size)

    Form.name = name
    mod = types.ModuleType(f"sf_test_rep_{name}")

    @hookimpl
    def silvanforge_representation_types():
        return [Form]

    mod.silvanforge_representation_types = silvanforge_representation_types
    return mod


@pytest.fixture
def extra_reps():
    """Registers representation modules into the process registry for one test."""
    reg = plugins.registry()
    added = []

    def add(mod):
        reg.register(mod, name=mod.__name__)
        added.append(mod.__name__)

    yield add
    for name in added:
        reg.pm.unregister(name=name)


def test_a_third_party_program_representation_is_chosen_by_its_cost(extra_reps):
    """The chooser asks every representation for its cost: the cheapest wins, a refusal never
    does, and a representation named by the user runs whatever its cost."""
    import numpy as np
    from strategies import make_forest, rows_for

    from silvanforge.runtime import reference

    forest = make_forest(seed=3)
    X = rows_for(forest, np.random.default_rng(0), 50)
    extra_reps(_program_rep("cheap", 0.0))
    extra_reps(_program_rep("refusing", None))
    costs = {rep: ns for rep, ns, _ in plugins.registry().rep_costs(forest, "cpu", None)}
    assert costs["cheap"] == 0.0 and costs["refusing"] is None and costs["sparse"] > 0
    cf = sf.compile(forest)
    assert cf.rep == "cheap"
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))
    named = sf.compile(forest, rep="refusing")
    assert named.rep == "refusing"
    np.testing.assert_array_equal(named.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))
    # Walk options choose among walk representations only.
    assert sf.compile(forest, tile_size=2).rep == "sparse"
    with pytest.raises(sf.InputError, match="the cheap representation does not walk trees: it takes no schedule"):
        sf.compile(forest, rep="cheap", schedule="default")


def test_a_representation_class_that_breaks_the_contract_is_a_plugin_error(extra_reps):
    """A listed class that is no representation, or lacks a required method, is named."""
    from strategies import make_forest

    from silvanforge.rep import Representation

    class Half(Representation):
        name = "half"

        def buffers(self, forest, layout):
            raise AssertionError("never laid out")

    mod = types.ModuleType("sf_test_rep_half")

    @hookimpl
    def silvanforge_representation_types():
        return [Half]

    mod.silvanforge_representation_types = silvanforge_representation_types
    extra_reps(mod)
    with pytest.raises(PluginError, match="representation 'half' .* does not implement root, load_threshold"):
        sf.compile(make_forest(seed=3), rep="half")


def test_plugin_commands_are_added_whatever_is_imported_first():
    """`forge bench` comes from silvanforge-bench's entry point; its module imports the CLI for
    the option builders, so importing it first must not lose the command (fresh process)."""
    import subprocess

    code = ("import silvanforge_bench.cli\nfrom silvanforge import cli\n"
            "import sys\nsys.exit(cli.main(['--help']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "bench" in out.stdout


def test_the_gpu_backend_is_a_distribution_of_its_own():
    """silvanforge-gpu, which both GPU targets require, adds `forge tune-gpu`; the core imports none
    of it (its lowering arrives through the GPU targets' ``lower``)."""
    import subprocess

    commands = {ep.name: ep.dist.name for ep in metadata.entry_points(group=cli.COMMANDS_GROUP)}
    assert commands.get("tune-gpu") == "silvanforge-gpu"
    for target in ("silvanforge-target-cuda", "silvanforge-target-amd"):
        assert any(r.startswith("silvanforge-gpu") for r in metadata.requires(target))
    # (the GPU targets' registration imports silvanforge_gpu.target, a few lines; none of the
    # backend's lowering, emitter, runtime or template is imported for the CPU)
    code = ("import sys, silvanforge as sf\nsf.lower(sf.load_model(sys.argv[1]), target='cpu')\n"
            "print(sorted(m for m in sys.modules if 'gpu' in m and m not in ('silvanforge_gpu', 'silvanforge_gpu.target')\n"
            "             and not m.startswith('__editable__')))")  # an editable install's finder
    model = str(ROOT / "examples" / "model.json")
    out = subprocess.run([sys.executable, "-c", code, model], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _own_lowering_target(reads: list):
    """A third-party target ``seq`` that lowers by itself (``Target.lower``) from the core's
    public pieces, with a placement that counts the walks' input reads and otherwise keeps the
    generator's code, and runs the result through the cpu target's compile."""
    from silvanforge.ir import lir
    from silvanforge.lowering.walkgen import WalkGenerator
    from silvanforge.lowering.walksetup import setup_walks, walk_module
    from silvanforge.scheduler import canned
    from silvanforge.target import Target

    class Counting:
        def __init__(self, setup):
            self.gen = WalkGenerator(setup, placement=self)

        def lower(self, op):
            self.gen.lower(op)

        def lower_body(self, ops):
            return self.gen.lower_body(ops)

        def row_value(self, row, feature, row_at=None):
            reads.append(feature)
            return self.gen.row_value(row, feature, row_at)

        def slot_index(self, target, slots, row, out):
            return self.gen.slot_index(target, slots, row, out)

        def fold_rows(self, op, r, k, body):
            self.gen.fold_rows(op, r, k, body)

    class Seq(Target):
        name = "seq"

        def default_schedule(self, forest, batch_size, options=None):
            return canned("default", forest, batch_size)

        def lower(self, forest, fn, rep, tile_size, options):
            if rep == "array":
                return "not a module"
            setup = setup_walks(forest, fn, rep, tile_size=tile_size)
            place = Counting(setup)
            place.gen.b.begin_function()
            for op in fn.body:
                place.lower(op)
            body = place.gen.b.block
            function = lir.Function("predict_0", body, dict(place.gen.b.locals), parallel="rows", row_parallel=False)
            return walk_module(setup, [function], {**place.gen.info, "lowered_by": "seq"})

        def compile(self, module, options):
            return plugins.registry().target("cpu").compile(module, options)

    return target_module("sf_test_own_lowering", Seq)


def test_a_target_brings_its_own_lowering(extra_reps):
    """``Target.lower``: a target's own MIR -> LIR, built from the core's public walk
    generator by composition; a target that does not answer takes the core's lowering."""
    import numpy as np
    from strategies import make_forest, rows_for

    from silvanforge.runtime import reference

    reads: list = []
    extra_reps(_own_lowering_target(reads))
    forest = make_forest(seed=3)
    X = rows_for(forest, np.random.default_rng(0), 50)
    cf = sf.compile(forest, target="seq", rep="sparse", threads=1)
    assert cf.lir_module.info["lowered_by"] == "seq" and reads
    np.testing.assert_array_equal(cf.predict(X, output_margin=True), reference.predict(forest, X, output_margin=True))
    assert "lowered_by" not in sf.lower(forest, target="cpu", rep="sparse").lir.info
    with pytest.raises(PluginError, match="target 'seq' lowered to str, not an LIR module"):
        sf.lower(forest, target="seq", rep="array")


def test_plugins_add_named_schedules(extra_reps):
    """``silvanforge_schedules``: the GPU targets name their template ``gpu-template`` (both list
    one function); a plugin giving a taken name another schedule is an error."""
    from strategies import make_forest

    from silvanforge.scheduler import CANNED, Schedule

    named = plugins.registry().schedules()
    assert set(CANNED) < set(named) and "gpu-template" in named
    assert "gpuDimension" in sf.lower(make_forest(seed=3), target="amd", schedule="gpu-template").schedule.to_text()
    mod = types.ModuleType("sf_test_schedule_clash")

    @hookimpl
    def silvanforge_schedules():
        return {"xgboost": lambda forest, batch_size: Schedule()}

    mod.silvanforge_schedules = silvanforge_schedules
    extra_reps(mod)
    with pytest.raises(PluginError, match="two schedules are named 'xgboost'"):
        sf.compile(make_forest(seed=3), schedule="xgboost")


def _projects() -> dict:
    """name -> [project] table of every distribution in this repository."""
    import tomllib

    found = {}
    for path in [ROOT / "pyproject.toml", *ROOT.glob("plugins/*/pyproject.toml"),
                 *ROOT.glob("plugins/importers/*/pyproject.toml")]:
        project = tomllib.loads(path.read_text())["project"]
        found[project["name"]] = project
    return found


def _requirement_names(requirements) -> list[str]:
    import re

    return [re.match(r"[A-Za-z0-9_.-]+(\[[^]]*\])?", r).group(0) for r in requirements]


def _closure(names, projects) -> set[str]:
    """Every distribution ``names`` install, following this repository's projects (and the
    core's extras where a requirement asks for them)."""
    core = projects["silvanforge"]
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        base, _, extras = name.partition("[")
        if name in seen:
            continue
        seen.add(name)
        if base == "silvanforge" and extras:
            for extra in extras.rstrip("]").split(","):
                todo += _requirement_names(core["optional-dependencies"][extra])
        elif base in projects:
            todo += _requirement_names(projects[base].get("dependencies", []))
    return {name.partition("[")[0].lower() for name in seen}


def test_extras_name_the_plugins_by_what_they_are_for():
    """``pip install "silvanforge[xgboost,cpu]"`` installs the XGBoost importer, the CPU target
    and every representation it chooses among, and nothing of ONNX; each extra names
    distributions of this repository (or the libraries it is about)."""
    projects = _projects()
    extras = projects["silvanforge"]["optional-dependencies"]
    assert {"xgboost", "lightgbm", "onnx", "catboost", "sklearn", "cpu", "cuda", "amd", "bench", "dask", "all"} <= set(extras)
    for extra, requirements in extras.items():
        for name in _requirement_names(requirements):
            base = name.partition("[")[0]
            if base.startswith("silvanforge"):
                assert base in projects, f"extra {extra!r} names {base!r}, which is no distribution here"
    xgb_cpu = _closure(["silvanforge[xgboost,cpu]"], projects)
    reps = {name for name in projects if name.startswith("silvanforge-rep-")}
    assert {"silvanforge-importer-xgboost", "silvanforge-target-cpu"} | reps <= xgb_cpu
    assert not {"onnx", "silvanforge-importer-onnx", "silvanforge-gpu", "pyopencl"} & xgb_cpu
    assert "onnx" in _closure(["silvanforge[onnx]"], projects)
    assert "silvanforge-gpu" in _closure(["silvanforge[cuda]"], projects) & _closure(["silvanforge[amd]"], projects)
    every = {name for name in projects if name != "silvanforge"}
    assert every <= _closure(["silvanforge[all]"], projects) | {"silvanforge-importers"}
    # the installed core carries the same extras (what pip reads)
    installed = metadata.requires("silvanforge") or []
    assert any(r.startswith("silvanforge-importer-onnx") and 'extra == "onnx"' in r for r in installed), installed
