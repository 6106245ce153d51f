"""Compile options: one frozen object holding everything that decides the program a compile builds.

``compile``, ``lower`` and ``show`` (and ``forge compile`` / ``forge show``) build one
:class:`CompileOptions` from their keyword arguments, resolve it once (:meth:`CompileOptions.resolved`:
the lowering knobs set by the context managers below and ``SILVANFORGE_VECTOR_WALK``) and pass
that object down through the lowering.  Nothing deeper reads a context or the environment, so
the options a compiled model reports (``CompiledForest.options``, ``summary()``, ``forge show``)
and its artifact records (``meta.json``) are all that decided its program, and loading the
artifact lowers the same program again.

The context managers (:func:`vector_walks`, :func:`split_rows`, :func:`leaf_self_loops`,
:func:`per_tree_walk_depth`, :func:`node_widths`) are for tests and A/B benchmarks: what is
compiled inside the block takes their values, as if given in the options, and records them.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from silvanforge.errors import InputError

# The environment variable a benchmark sets to run vector walks (0 / 1); read once per compile.
VECTOR_WALK_ENV = "SILVANFORGE_VECTOR_WALK"
WIDTHS = ("int8", "int16", "int32")


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """What decides the program of a compile.  ``None`` everywhere means "the compiler chooses"
    (for the model, the target and the batch size); a compiled model's options
    (``CompiledForest.options``) hold what was chosen for the first six fields.

    The compile (see :func:`silvanforge.compile` for how each is given):

    - ``target``: the target plugin's name (None: the host's,
      :meth:`silvanforge.plugins.PluginRegistry.default_target`).
    - ``rep``: the representation plugin laying out the trees (None: the cheapest by their costs).
    - ``schedule``: the loop nest: a :class:`silvanforge.scheduler.Schedule`, its text, a canned
      name or a schedule file (None: the target's default).  Chosen: a ``Schedule``.
    - ``batch_size``: rows per call to tune for (None: any).
    - ``threads``: threads ``predict`` uses by default (None: all usable CPUs).
    - ``pad``: pad trees to one depth so walks skip leaf checks (None: where cheap).
    - ``tile_size``: nodes a walk step evaluates (1: node by node).
    - ``profile``: a :class:`silvanforge.Profile` (or its file) guiding tiling; the tiling it
      gives is what an artifact records (``tiling.npz``), not the profile.
    - ``reorder``: ``"depth"`` or ``"peel"`` groups trees (None: model order).
    - ``cpu``: the CPU the machine code is for: a name the target knows (``"x86-64-v3"``,
      ``"znver3"``, ``"skylake-avx512"``: :meth:`silvanforge.target.Target.check_cpu`), or None
      for this host's own CPU (``"native"`` is None).  It decides the code, not the program: the
      LIR is the same for every CPU.

    The plan (:mod:`silvanforge.plan.bands`: which form answers a call of n rows):

    - ``plan_min_ns``: without tuning, forests whose cheapest representation is estimated under
      this many ns a row, and whose other forms would save less, get one form (None:
      :data:`silvanforge.plan.policy.PLAN_MIN_NS`; 0: every model gets its forms by request size).

    The lowering of walks (:mod:`silvanforge.lowering.walksetup`; None: its chooser decides per model):

    - ``vector_walks``: interleaved walks run as SIMD vectors (True) or as scalar walks in turn
      (False; None: the default, :data:`silvanforge.lowering.walksetup.VECTOR_WALK_DEFAULT`).
    - ``split_rows``: CPU walks read split rows wherever exact, even for wide rows (True), or
      never (False); None: where they pay (:func:`silvanforge.lowering.walksetup.can_split_rows`).
    - ``set_columns``: categorical splits of walks reading split rows decide their category sets
      as the row is split, one column a set (True; :func:`silvanforge.lowering.layout.split_row_sets`),
      or test a bitset at each step (False); None: where it pays
      (:func:`silvanforge.lowering.walkcost.set_columns_pay`).
    - ``leaf_self_loops``: leaves as fixed points of a step wherever split rows are read (True)
      or never (False); None: :func:`silvanforge.lowering.walksetup.want_leaf_self_loops`.
    - ``per_tree_walk_depth``: walks through self-looping leaves go to each tree's own depth
      (True, what None does) or to the forest's, every step peeled (False).
    - ``feature_width``, ``index_width``: the narrowest integer type (``"int8"``, ``"int16"``,
      ``"int32"``) node arrays store feature indices and the representations' index fields in
      (None: the narrowest exact; ``"int32"``: the wide layout).
    - ``inline_leaves``: False keeps leaf values in the separate leaves array (None and True:
      in the threshold slot wherever exact).
    - ``packed_default_left``: False keeps the default-left bit in the flags byte (None and
      True: in the feature field wherever it is all a split's flags say).

    The representations' own (:class:`RepOptions`):

    - ``rep_options``: a mapping of option names to values (``bool``, ``int``, ``float``,
      ``str`` or None) that representation plugins list as theirs (``option_keys`` of their
      class, :mod:`silvanforge.rep`), each documented by its plugin (the bitvector
      representation's: the options module of its plugin).  A key no installed
      representation lists, or a value its representation refuses, is an InputError.
    """

    target: str | None = None
    rep: str | None = None
    schedule: Any = None
    batch_size: int | None = None
    threads: int | None = None
    pad: bool | None = None
    tile_size: int = 1
    profile: Any = None
    reorder: str | None = None
    cpu: str | None = None
    plan_min_ns: float | None = None
    vector_walks: bool | None = None
    split_rows: bool | None = None
    set_columns: bool | None = None
    leaf_self_loops: bool | None = None
    per_tree_walk_depth: bool | None = None
    feature_width: str | None = None
    index_width: str | None = None
    inline_leaves: bool | None = None
    packed_default_left: bool | None = None
    rep_options: Mapping = dataclasses.field(default_factory=lambda: RepOptions())

    def __post_init__(self):
        object.__setattr__(self, "rep_options", RepOptions(self.rep_options))
        if self.cpu is not None:
            if not isinstance(self.cpu, str):
                raise InputError(f"cpu must be a CPU name such as 'x86-64-v3' (or None / 'native': this "
                                 f"host), got {type(self.cpu).__name__}")
            # "native" is this host: the default, recorded as None (what the target checks is
            # the name: silvanforge.api.compile_options).
            if self.cpu.strip().lower() in ("", "native"):
                object.__setattr__(self, "cpu", None)
        value = self.plan_min_ns
        if value is not None:
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
                    or not 0 <= value < float("inf"):
                raise InputError(f"plan_min_ns must be a number of ns, 0 or more (or None), got {value!r}")
            object.__setattr__(self, "plan_min_ns", float(value))
        for name in LOWERING_FIELDS:
            value = getattr(self, name)
            if name in ("feature_width", "index_width"):
                if value is not None:
                    try:
                        width = np.dtype(value).name
                    except TypeError:
                        width = None
                    if width not in WIDTHS:
                        raise InputError(f"{name} must be one of {', '.join(WIDTHS)} (or None), got {value!r}")
                    object.__setattr__(self, name, width)
            elif value is not None and not isinstance(value, (bool, np.bool_)):
                raise InputError(f"{name} must be True, False or None, got {value!r}")
            elif value is not None:
                object.__setattr__(self, name, bool(value))

    def resolved(self) -> CompileOptions:
        """These options with the lowering knobs left None taken from the context managers in
        effect (:func:`override`) and, for ``vector_walks``, from ``SILVANFORGE_VECTOR_WALK``: the
        one place either is read.  A value given in the options wins.  The target is left as
        given: :func:`silvanforge.api.compile_options` chooses the host's."""
        given = {name: value for name, value in (_OVERRIDES.get() or {}).items()
                 if getattr(self, name) is None}
        if self.vector_walks is None and "vector_walks" not in given:
            env = os.environ.get(VECTOR_WALK_ENV, "").strip().lower()
            if env in ("0", "false", "no", "off"):
                given["vector_walks"] = False
            elif env in ("1", "true", "yes", "on"):
                given["vector_walks"] = True
        return dataclasses.replace(self, **given) if given else self

    def lowering(self) -> dict:
        """The lowering knobs (JSON values), as ``meta.json`` records them."""
        return {name: getattr(self, name) for name in LOWERING_FIELDS}

    @classmethod
    def from_meta(cls, meta: dict, schedule=None) -> CompileOptions:
        """The options an artifact's ``meta.json`` records (checked by
        :mod:`silvanforge.artifact.archive`); ``schedule``: its parsed schedule."""
        return cls(target=meta["target"], rep=meta["rep"],
                   schedule=meta["schedule"] if schedule is None else schedule,
                   batch_size=meta.get("batch_size"), threads=meta.get("threads"),
                   pad=bool(meta.get("pad", False)), tile_size=meta.get("tile_size", 1),
                   reorder=meta.get("reorder"), cpu=meta.get("cpu"), plan_min_ns=meta.get("plan_min_ns"),
                   rep_options=meta.get("rep_options") or {},
                   **{name: meta.get(name) for name in LOWERING_FIELDS})

    def describe(self) -> str:
        """One line naming every option that is set (``forge show``); the schedule on its own
        line elsewhere, so here only whether one was given."""
        parts = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "schedule":
                continue
            if field.name == "profile":
                value = None if value is None else "given"
            if field.name == "rep_options":
                parts += [f"{key}={val}" for key, val in value.items()]
                continue
            if value is None or (field.name == "tile_size" and value == 1):
                continue
            parts.append(f"{field.name}={value}")
        return " ".join(parts)


def kernel_options(opts: CompileOptions) -> dict:
    """What a target's ``compile`` (and ``load_kernel``, ``source``) takes besides the program:
    the threads and batch size, and the CPU the code is for (None: this host)."""
    return {"threads": opts.threads, "batch_size": opts.batch_size, "cpu": opts.cpu}


class RepOptions(Mapping):
    """``CompileOptions.rep_options``: a frozen mapping, sorted by key, of JSON scalars (what
    ``meta.json`` records); equal to any mapping with the same items."""

    def __init__(self, items: Mapping | None = None):
        items = {} if items is None else items
        if not isinstance(items, Mapping):
            raise InputError(f"rep_options must be a mapping of option names to values, got {type(items).__name__}")
        for key, value in items.items():
            if not isinstance(key, str):
                raise InputError(f"rep_options keys are option names (strings), got {key!r}")
            if value is not None and not isinstance(value, (bool, int, float, str)):
                raise InputError(f"rep_options[{key!r}] must be a bool, number, string or None, got {value!r}")
        self._items = dict(sorted(items.items()))

    def __getitem__(self, key):
        return self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(self._items.items()))

    def __repr__(self) -> str:
        return repr(self._items)


LOWERING_FIELDS = ("vector_walks", "split_rows", "set_columns", "leaf_self_loops", "per_tree_walk_depth",
                   "feature_width", "index_width", "inline_leaves", "packed_default_left")


# ------------------------------------------------------------------ context managers
# The lowering knobs set by the blocks below; read only by CompileOptions.resolved.
_OVERRIDES: contextvars.ContextVar = contextvars.ContextVar("silvanforge_option_overrides", default=None)


@contextlib.contextmanager
def override(**knobs):
    """Compile what is compiled inside the block with these lowering knobs (fields of
    :class:`CompileOptions` named in :data:`LOWERING_FIELDS`) unless its options give them;
    the compile records them."""
    unknown = sorted(set(knobs) - set(LOWERING_FIELDS))
    if unknown:
        raise InputError(f"not lowering options: {', '.join(unknown)}")
    CompileOptions(**knobs)  # checks the values
    token = _OVERRIDES.set({**(_OVERRIDES.get() or {}), **knobs})
    try:
        yield
    finally:
        _OVERRIDES.reset(token)


def vector_walks(enabled: bool = True):
    """Walk interleaved rows as SIMD vectors (``True``) or as scalar walks in turn (``False``) for
    what is compiled inside the block; see :meth:`silvanforge.lowering.walkgen.WalkGenerator._walk_vector`."""
    return override(vector_walks=bool(enabled))


def split_rows(enabled: bool = True):
    """Let CPU walks read missing-split rows wherever exact (``True``, even for wide rows) or
    never (``False``) for what is compiled inside the block (A/B benchmarks, tests of both
    paths); outside any block the chooser decides (:func:`silvanforge.lowering.walksetup.can_split_rows`)."""
    return override(split_rows=bool(enabled))


def set_columns(enabled: bool = True):
    """Let walks reading split rows decide categorical splits' sets as rows are split (``True``,
    wherever split rows are read) or never (``False``: a bitset test a step) for what is
    compiled inside the block (A/B benchmarks, tests of both); outside any block the chooser
    decides (:func:`silvanforge.lowering.walkcost.set_columns_pay`)."""
    return override(set_columns=bool(enabled))


def per_tree_walk_depth(enabled: bool = True):
    """Walks through self-looping leaves go to each tree's own depth (``True``, the default) or
    to the forest's, every step peeled (``False``), for what is compiled inside the block (A/B)."""
    return override(per_tree_walk_depth=bool(enabled))


def leaf_self_loops(enabled: bool = True):
    """Ask representations for leaves as fixed points wherever split rows are read (``True``)
    or never (``False``) for what is compiled inside the block (A/B, tests); outside any block
    :func:`silvanforge.lowering.walksetup.want_leaf_self_loops` decides."""
    return override(leaf_self_loops=bool(enabled))


def node_widths(feature=None, index=None, inline_leaves: bool | None = None,
                packed_default_left: bool | None = None):
    """Force node-array widths for what is compiled inside the block: ``feature`` and ``index``
    are minimum widths (``"int32"`` gives the wide layout), ``inline_leaves=False`` keeps leaf
    values in the separate leaves array, ``packed_default_left=False`` keeps the default-left bit
    in the flags byte.  The default (no block) chooses the narrowest exact."""
    knobs = {"feature_width": feature, "index_width": index, "inline_leaves": inline_leaves,
             "packed_default_left": packed_default_left}
    return override(**{k: v for k, v in knobs.items() if v is not None})


__all__ = ["CompileOptions", "RepOptions", "LOWERING_FIELDS", "kernel_options", "override", "vector_walks",
           "split_rows", "set_columns", "per_tree_walk_depth", "leaf_self_loops", "node_widths"]
