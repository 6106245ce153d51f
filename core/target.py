"""The target contract: what a plugin implements to turn LIR into something that runs.

A *target* is a class deriving from :class:`Target`, listed by its plugin's
``silvanforge_targets`` hook (the one hook of this contract), as representations are listed by
``silvanforge_representation_types``.  The registry makes one instance a process and hands it
out by name (``registry().target("cpu")``); every method below is asked of that instance, so an
instance may keep what is costly to find (a device context, the host's signature).

Required: :attr:`~Target.name` and :meth:`~Target.compile`, returning a
:class:`silvanforge.runtime.kernel.Kernel`.  Everything else has a default a target overrides where it
has something of its own: whether it runs here, its default schedule, its own MIR -> LIR
lowering, its generated source, a host key for the code cache, reloading saved code and
compiling for a named CPU (``cpu=``), and the vector unit its code uses (:class:`Vectors`, which
representations' estimates weigh).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import ClassVar

from silvanforge.errors import InputError, PluginError
from silvanforge.ir import lir
from silvanforge.plan.overlap import native_work
from silvanforge.scheduler import canned

__all__ = ["Target", "Vectors", "check_class", "default_schedule_of", "native_work"]


@dataclasses.dataclass(frozen=True)
class Vectors:
    """The vector unit a target's code is generated for, as a representation's ``cost`` weighs it
    (``cost(..., vectors=)``, :mod:`silvanforge.rep`).  The shipped estimates were measured on
    AVX-512 code with byte permutes (Zen 4); None where a target says nothing prices as that.

    - ``isa``: ``"avx512"``, ``"avx2"``, ``"sse"``, ``"neon"`` (a CPU's), or a GPU target's own name;
    - ``bits``: the widest vector register (512, 256, 128);
    - ``byte_permute``: a permute of a 64-byte table in one instruction (AVX-512 VBMI's
      ``vpermb``/``vpermi2b``); without it a lookup in a table of bytes takes one 16-byte
      shuffle (``vpshufb``, NEON ``tbl``) and a blend per 16 entries;
    - ``lane_permute``: a permute of 4-byte elements across a whole register (AVX2 ``vpermps``,
      AVX-512 ``vpermi2ps``); NEON has none of a register's width.
    """

    isa: str
    bits: int
    byte_permute: bool = False
    lane_permute: bool = True

    @property
    def key(self) -> str:
        """A short text naming it, for memo keys and messages."""
        return f"{self.isa}/{self.bits}{'/vbmi' if self.byte_permute else ''}"


class Target:
    """Base of targets.  ``module`` below is an LIR :class:`silvanforge.ir.lir.Module`;
    ``options`` of :meth:`compile` and :meth:`load_kernel` a dict with at least ``threads``,
    ``batch_size`` and ``cpu`` (each may be None: all CPUs, any batch, this host's CPU; ``cpu``
    is only ever set for a target whose :meth:`check_cpu` took it)."""

    #: The name users pass as ``target=`` and ``--target`` (unique among installed plugins).
    name: ClassVar[str] = ""
    #: ``"cpu"`` or ``"gpu"``: the kind of machine it runs on, which representations' ``cost``
    #: and the compiler's defaults are asked about (a ``gpu`` target keeps its own schedule when
    #: trees are reordered; its sums may be reordered).  How its MIR becomes LIR is
    #: :meth:`lower`'s, not the kind's.
    kind: ClassVar[str] = "cpu"
    #: Whether its code evaluates linear leaves (LightGBM linear trees) exactly: each multiply
    #: and add of a leaf's model rounded on its own, never fused into one (as a GPU compiler
    #: does unless told not to).  Forests with them are refused for targets without it.
    linear_leaves: ClassVar[bool] = False

    def can_run_here(self) -> tuple[bool, str]:
        """``(True, "")`` if it can run on this machine, else ``(False, reason)`` with a reason a
        user can act on (``"no GPU driver found"``; ``forge plugins`` shows it).  Generating
        code (:meth:`lower`, :meth:`source`) must work without it."""
        return True, ""

    def default_schedule(self, forest, batch_size: int | None, options=None, walks=None):
        """The :class:`silvanforge.scheduler.Schedule` to use when the user gives none, for
        ``forest`` (the HIR forest after the passes) and ``batch_size`` (None: any).
        ``options``: the compile's :class:`silvanforge.options.CompileOptions` (its lowering
        knobs, such as ``leaf_self_loops``, may change what pays), or None when asked outside a
        compile.  ``walks``: the representation chosen, whose walks the schedule drives (a
        :class:`silvanforge.rep.ChosenWalks`: its class and estimates), or None outside a
        compile; a target whose method takes no ``walks`` is not given it.  By default the
        core's canned ``default`` schedule."""
        return canned("default", forest, batch_size)

    def lower(self, forest, fn, rep: str, tile_size: int, options):
        """Lower the MIR function ``fn`` (a :class:`silvanforge.ir.mir.MirFunction`) of
        ``forest`` (the HIR forest after the passes, which ``fn`` walks) with the walk
        representation named ``rep`` to an LIR module, or return None (the default) to take
        the core's lowering (:func:`silvanforge.lowering.walkgen.lower_to_lir`: one function per phase,
        run by threads over row ranges).  ``tile_size``: nodes a walk step evaluates (1: node
        by node).  ``options``: the compile's :class:`silvanforge.options.CompileOptions`,
        whose lowering knobs (node widths, vector walks, ...) the lowering honours: pass it to
        ``setup_walks``.  A target whose code runs otherwise (a GPU backend's kernels) builds
        its module from the core's public pieces: :func:`silvanforge.lowering.walksetup.setup_walks`
        (layout and buffers), a :class:`silvanforge.lowering.walkgen.WalkGenerator` given a placement
        of its own (where loops, caches, input reads and folds go) and
        :func:`silvanforge.lowering.walksetup.walk_module`.  Raise
        :class:`silvanforge.errors.ScheduleError` for schedules it cannot lower."""
        return None

    def compile(self, module, options: dict):
        """Turn ``module`` into a :class:`silvanforge.runtime.kernel.Kernel`.  Raise
        :class:`silvanforge.errors.PluginError` if it cannot run here, and
        :class:`silvanforge.errors.ScheduleError` for a program it cannot run (a GPU
        construct on a CPU).  A long call outside Python in it (generating machine code, with
        the GIL released) goes within :func:`native_work`: the compile may start the plan's
        other forms meanwhile, and lower the next one (:mod:`silvanforge.plan.overlap`)."""
        raise NotImplementedError

    def load_kernel(self, module, blob: bytes, options: dict):
        """Rebuild a kernel from ``blob`` (bytes a kernel's ``artifact()`` returned) for the same
        ``module``, or return None (the default) to have it compiled again (code built for
        another host, or another CPU than ``options["cpu"]``).  ``module`` may be the runnable part only of the program
        (:mod:`silvanforge.ir.lir_io`: functions without bodies, buffers with their data)."""
        return None

    def source(self, module, options: dict | None = None) -> str:
        """The generated code as text (LLVM IR, CUDA C, OpenCL C) for
        ``forge show --level target``; by default the LIR as printed.  ``options``: the
        compile's, as :meth:`compile` takes them, passed only where ``cpu`` is set (a target
        that takes no ``cpu`` may leave the parameter out)."""
        return lir.format_module(module)

    def check_cpu(self, cpu: str) -> str | None:
        """The CPU ``compile(..., cpu=cpu)`` names, checked: the target's own spelling of it, or
        None for the host's own CPU (``"native"``), or an
        :class:`~silvanforge.errors.InputError` saying why the target cannot compile for it
        (an unknown name).  Code for a named CPU may be built and saved on a host without it;
        its kernel refuses to run where the host lacks the CPU's features.  By default a target
        compiles for no named CPU (a GPU target: its device decides)."""
        raise InputError(f"target {self.name!r} does not compile for a named CPU (cpu={cpu!r}): "
                         "cpu= is for CPU targets such as 'cpu'")

    def vectors(self, cpu: str | None) -> Vectors | None:
        """The vector unit of code compiled for ``cpu`` (a name :meth:`check_cpu` gave, or None:
        this host), which the representations' estimates weigh when choosing a form; None (the
        default): the machine the shipped estimates were measured on."""
        return None

    def host_key(self) -> str | None:
        """A short string naming everything this host's machine code depends on (for the CPU:
        triple, CPU name and features, LLVM version), or None (the default: code that does not
        depend on the host).  The code cache (:mod:`silvanforge.artifact.codecache`) keys entries by
        it, so hosts sharing a cache directory keep their own code."""
        return None

    def contributions_kernel(self):
        """A compiled evaluator of SHAP contributions on the host, or None (the default: the
        core's NumPy evaluation answers).  It reads a model's paths as the flat arrays of
        :mod:`silvanforge.runtime.shap_arrays`: it has ``arg_layout`` (the names of those arrays,
        in the order its int64 block of addresses gives them) and ``run(args, X, row_begin,
        row_end, tree_begin, tree_end, phi, scratch)`` (addresses and bounds; ``scratch``: the
        call's own ``max_splits`` bytes a row), which adds the paths of those trees to those
        rows of ``phi`` and may be called from many threads at once."""
        return None

    def hashed_columns_kernel(self, saved: bytes | None = None):
        """A compiled evaluator of computed columns (``Forest.hashed_combinations``: CatBoost's
        CTRs and one-hot tests) on the host, or None (the default: the core's NumPy evaluation
        answers).  It reads a model's combinations as the flat arrays of
        :mod:`silvanforge.inputs.hashed_rows`: it has ``arg_layout`` (the names of those arrays
        and counts, in the order its int64 block gives them), ``kinds`` (its code of each
        element kind: ``cat``, ``float``, ``onehot``) and ``run(args, row_begin, row_end)``
        (the block's address and bounds), which fills those rows' computed columns and may be
        called from many threads at once.  Optionally ``run_shares(args, bounds, row_bytes)``:
        rows ``[bounds[k], bounds[k + 1])`` for every k in parallel by a hand-off of the
        target's own, True when done, False (nothing run: the core's Python pool runs them)
        where it cannot now.  Optionally ``artifact()``: bytes of its machine code
        that a compiled model's artifact keeps, given back as ``saved`` by a trusted load (the
        target maps them where they suit this host, else compiles; the core passes ``saved``
        only to the target that made them)."""
        return None

    def arrow_columns_kernel(self):
        """A compiled copier of arrow number columns into rows on the host, or None (the
        default: arrow's own conversions answer, a call a column).  It has ``arg_layout`` (the
        names of the words of its int64 block: ``batch``, the address of a record batch exported
        through the Arrow C data interface, which it releases; ``count`` columns, the batch's
        children ``columns`` of kinds ``kinds`` written to rows ``out``'s ``features`` by
        ``row_stride`` and ``column_stride``, in elements), ``kinds`` (arrow type name -> its
        code of that type) and ``run(args, row_bytes)`` (the block's address; rows of float32,
        4, or float64, 8): each value through float64 to the rows' type, a null NaN.  It may
        be called from many threads at once (:mod:`silvanforge.inputs.arrow_frames`)."""
        return None

    def tune(self, forest, rows, sizes, budget_s: float, threads, progress):
        """The plan search of ``sf.tune`` / ``forge tune`` for a target that is not a CPU (the
        core times CPU forms itself, :mod:`silvanforge.plan.tuning`), or None (the default): this
        target has none.  ``forest``: the model (HIR, as imported); ``rows``: sample rows as an
        array of the model's thresholds' dtype, or None (draw your own); ``sizes``: rows per
        call to tune for, or None (the target's own); ``budget_s``: seconds to spend;
        ``threads``: what the caller gave (a GPU target may ignore it); ``progress(what, done,
        total)``: tell the user what is timed.

        Return ``(bands, record)``: ``bands`` a list of ``(up_to_rows, CompileOptions)`` in
        order, the last with ``None`` (no bound), as :func:`silvanforge.plan.tuning.compile_plan`
        takes them (it compiles the winners into the model), and ``record`` the tuning record
        the artifact keeps (plain JSON): :func:`silvanforge.plan.tuning.record_header` gives its
        common part (host key, versions, sizes...), to which the target adds ``candidates``
        (each with ``form`` and ``us_per_call``, by rows) and ``winners`` (``rows``, a
        candidate's index).  A load on a host whose :meth:`host_key` differs from the record's
        warns and uses the untuned plan."""
        return None


def check_class(cls) -> None:
    """Why a class a plugin lists is not a usable target (raises PluginError)."""
    if not (isinstance(cls, type) and issubclass(cls, Target)):
        raise PluginError(f"{cls!r} is not a silvanforge.target.Target subclass")
    if not cls.name or not isinstance(cls.name, str):
        raise PluginError(f"target class {cls.__qualname__} has no name")
    if cls.kind not in ("cpu", "gpu"):
        raise PluginError(f"target {cls.name!r} says it is of kind {cls.kind!r}, not cpu or gpu")
    if cls.compile is Target.compile:
        raise PluginError(f"target {cls.name!r} ({cls.__qualname__}) does not implement compile")


def default_schedule_of(target: Target, forest, batch_size: int | None, options, walks):
    """``target.default_schedule`` of a compile: given the walks chosen where the target's method
    takes ``walks`` (one written before the core passed it is asked as before)."""
    if _takes_walks(getattr(target.default_schedule, "__func__", target.default_schedule)):
        return target.default_schedule(forest, batch_size, options, walks=walks)
    return target.default_schedule(forest, batch_size, options)


@functools.lru_cache(maxsize=None)
def _takes_walks(method) -> bool:
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    return "walks" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
