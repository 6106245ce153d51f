"""The representation contract: what a plugin implements to lay trees out in memory and tell the
core's walk generator how to read them, and every type it needs, in one public module.

A *walk representation* is a class deriving from :class:`Representation`, listed by its
plugin's ``silvanforge_representation_types`` hook (the one hook of this contract; see
``docs/writing-a-representation.md`` and the complete example under ``examples/``).  The core
makes one instance per compile, so an instance may keep what :meth:`~Representation.buffers`
computed for the methods that generate code afterwards.

How a walk reads a representation: the core lays the forest out in a shared node encoding
(:class:`ForestLayout`, one :class:`TreeLayout` a tree: children -1 at leaves, a forest-wide
``leaf_slot`` per leaf, thresholds in the comparison dtype, split flags ``FLAG_*``, features as
:attr:`TreeLayout.feature` says), the representation turns it into model buffers (NumPy
arrays, :class:`RepBuffers`), and then, while the core generates each walk, it answers with
LIR expressions (built with :class:`Builder`; ``b.load(buffer, index)`` reads a model buffer,
``Builder.const(value, type)`` makes a constant, ``Bin``/``Cmp``/``Cast``/``Select`` combine
them) for a node *handle*: an i64 expression naming a node, which the representation alone
interprets (an index into its arrays in every first-party representation).

Required methods: :meth:`buffers`, :meth:`root`, :meth:`load_threshold`,
:meth:`load_feature_index`, :meth:`load_split_flags`, :meth:`is_leaf`, :meth:`leaf_value`,
:meth:`child`.  Optional capabilities, off unless a class says so:

- :attr:`tiles`: lays out tiles (compiles with ``tile_size`` above 1; then a handle is a tile,
  ``lane`` picks a node of it and :meth:`load_tile_shape` gives its shape; see
  :mod:`silvanforge.frontend.tiling`).  Without it the core refuses tile sizes above 1 for it.
- self-looping leaves: when ``layout.leaf_self_loops`` is set, a representation whose
  ``child(leaf, 1)`` is the leaf itself returns ``info={"leaf_self_loops": True}`` from
  :meth:`buffers`; walks then run every tree its full depth without leaf checks.
- inline leaves: when ``layout.inline_leaves`` is set, a leaf's value may sit in its threshold
  slot (:meth:`leaf_value` then loads it from there).
- :meth:`cache_trees`: where a range of trees lives, for schedules that cache trees.
- :meth:`refuses`: why it cannot (or should not by default) run a forest on a kind of target:
  a refused representation is never chosen by default, and naming it is an error saying why.
- :meth:`cost`: the estimated ns a row of a forest it does not refuse, for the default choice
  among representations (None: never chosen by default, only by name).
- :attr:`~Representation.option_keys`: options of its own, given by users as keys of
  ``CompileOptions.rep_options``; recorded with the compile's other options.
- :attr:`~Representation.linear_leaves`: runs forests whose leaves hold linear models
  (LightGBM linear trees).  For a walk representation that means :meth:`leaf_value` returns
  ``layout.leaf_values`` entries exactly as laid out (the core evaluates the models:
  :mod:`silvanforge.lowering.linear_leaves`); a program representation evaluates them itself.  Without
  it such a forest is refused by the contract's refusal: :func:`refusal_of` gives the reason (the
  default choice skips it) and naming it with ``rep=`` is an error saying why.
"""

from __future__ import annotations

import dataclasses
import inspect

from collections.abc import Mapping
from typing import ClassVar

from silvanforge.errors import InputError, PluginError, UnsupportedModelError
from silvanforge.ir import lir
from silvanforge.ir.hir import Forest
from silvanforge.ir.lir import Bin, Builder, Cast, Cmp, Expr, Select
from silvanforge.lowering.linear_leaves import refusal
from silvanforge.lowering.layout import (FLAG_CATEGORICAL, FLAG_DEFAULT_LEFT, FLAG_OP_SHIFT, FLAG_ZERO_MISSING, ForestLayout,
                     RepBuffers, TreeLayout)
from silvanforge.lowering.walkcost import walk_estimate_ns

__all__ = [
    "Representation", "FieldArrays", "ProgramRepresentation", "ForestLayout", "TreeLayout", "RepBuffers", "Builder", "Bin", "Cast", "Cmp",
    "Select", "Expr", "Forest", "lir", "FLAG_CATEGORICAL", "FLAG_DEFAULT_LEFT", "FLAG_OP_SHIFT",
    "FLAG_ZERO_MISSING", "InputError", "UnsupportedModelError", "options_for", "instance", "cost_of",
    "called_cost_of", "refusal_of", "price_of", "ChosenWalks",
    "weighs_vectors",
    "refusal",
]


class _Options:
    """What both kinds of representation share: options of their own, and whether they run
    linear leaves."""

    #: Runs forests with linear leaves (LightGBM linear trees; see the module docstring).
    linear_leaves: ClassVar[bool] = False

    @classmethod
    def refuses(cls, forest: Forest, target_kind: str, options: Mapping | None = None) -> str | None:
        """Why this representation cannot, or should not by default, run ``forest`` on a
        ``target_kind`` target ("it has no splits", "runs on cpu targets, not gpu ones", "not
        chosen by default (its option ... is off)"); None: it can, and :meth:`cost` prices it.
        A refused representation is never chosen by default, and naming it with ``rep=`` is an
        error with the reason.  ``options``: as :meth:`cost`'s.  (The core adds its own refusal
        first: linear leaves where :attr:`linear_leaves` is off.)"""
        return None

    @classmethod
    def cost_called(cls, forest: Forest, target_kind: str, lowered_for: int | None, rows: int,
                    options: Mapping | None = None, vectors=None):
        """Estimated ns a row of the program lowered for ``lowered_for`` rows a call when a call
        brings ``rows``: what the plan weighs before giving small requests a form of their own.
        By default the estimate at ``rows`` (programs whose cost a row does not depend on what
        they were lowered for); a program of fixed blocks says what a partial block costs."""
        return cls.cost(forest, target_kind, rows,
                        **_extra(cls.cost, options if cls.option_keys else None, vectors))

    #: The keys of ``CompileOptions.rep_options`` this representation reads (documented by it).
    #: The core checks the given ones with :meth:`check_options` and passes them, and only
    #: them, to :meth:`cost` as ``options`` and to the instance as :attr:`options`; a key no
    #: installed representation lists is refused.  Without keys, neither receives any.
    option_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(self, options: Mapping | None = None):
        #: This compile's options of this representation (keys of :attr:`option_keys`).
        self.options = dict(options or {})

    @classmethod
    def check_options(cls, options: Mapping) -> None:
        """Raise :class:`InputError` naming what is wrong with ``options`` (keys of
        :attr:`option_keys` only)."""


def options_for(cls, rep_options: Mapping | None) -> dict:
    """The part of ``rep_options`` (``CompileOptions.rep_options``) representation class ``cls`` reads."""
    return {k: v for k, v in (rep_options or {}).items() if k in cls.option_keys}


def instance(cls, rep_options: Mapping | None = None):
    """The instance of representation class ``cls`` for one compile with ``rep_options``."""
    return cls(options_for(cls, rep_options)) if cls.option_keys else cls()


def weighs_vectors(method) -> bool:
    """Whether a representation's ``cost`` / ``cost_called`` / ``program`` takes ``vectors=`` (one
    written before the core passed it does not: it is priced and built the same on every
    vector unit)."""
    fn = getattr(method, "__func__", method)
    takes = _TAKES_VECTORS.get(fn)
    if takes is None:
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        takes = _TAKES_VECTORS[fn] = "vectors" in params or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return takes


_TAKES_VECTORS: dict = {}


def _extra(method, options, vectors) -> dict:
    """The keywords a representation's ``cost`` is passed: its options where it lists option
    keys (``options``: None otherwise), the vector unit where it weighs one."""
    kwargs = {} if options is None else {"options": options}
    if vectors is not None and weighs_vectors(method):
        kwargs["vectors"] = vectors
    return kwargs


def refusal_of(cls, forest: Forest, target_kind: str, rep_options: Mapping | None = None) -> str | None:
    """Why representation class ``cls`` will not run ``forest`` on a ``target_kind`` target: the
    core's refusal (linear leaves it does not run: :func:`refusal`), else the class's own
    (:meth:`Representation.refuses`, under its part of ``rep_options``); None: it runs it."""
    why = refusal(cls, forest)
    if why is None:
        why = cls.refuses(forest, target_kind, **({"options": options_for(cls, rep_options)} if cls.option_keys else {}))
    return why


def called_cost_of(cls, forest: Forest, target_kind: str, lowered_for: int | None, rows: int,
                   rep_options: Mapping | None = None, vectors=None) -> float | None:
    """``cls.cost_called`` under ``rep_options`` (:func:`cost_of`'s rules); None where refused."""
    if refusal_of(cls, forest, target_kind, rep_options) is not None:
        return None
    options = options_for(cls, rep_options) if cls.option_keys else None
    ns = cls.cost_called(forest, target_kind, lowered_for, rows, options=options,
                         **({"vectors": vectors} if vectors is not None and weighs_vectors(cls.cost_called) else {}))
    return None if ns is None or isinstance(ns, str) else float(ns)


def cost_of(cls, forest: Forest, target_kind: str, batch_size: int | None, rep_options: Mapping | None = None,
            vectors=None) -> float | None:
    """``cls.cost`` under ``rep_options`` (passed only to a class that lists option keys) and for
    ``vectors`` (a :class:`silvanforge.target.Vectors`, passed only to a ``cost`` that takes
    ``vectors=``); None where the class refuses ``forest`` (:func:`refusal_of` says why) or
    prices it only when named."""
    return price_of(cls, forest, target_kind, batch_size, rep_options, vectors)[0]


def price_of(cls, forest: Forest, target_kind: str, batch_size: int | None, rep_options: Mapping | None = None,
             vectors=None) -> tuple[float | None, str | None]:
    """``(ns, refusal)``: :func:`cost_of` and :func:`refusal_of` together, ``cost`` asked only
    where nothing refuses.  (A ``cost`` written before :meth:`Representation.refuses` returned
    its refusal as a string: taken as the refusal, so such a plugin keeps working.)"""
    why = refusal_of(cls, forest, target_kind, rep_options)
    if why is not None:
        return None, why
    options = options_for(cls, rep_options) if cls.option_keys else None
    ns = cls.cost(forest, target_kind, batch_size, **_extra(cls.cost, options, vectors))
    if isinstance(ns, str):
        return None, ns
    return (None if ns is None else float(ns)), None


class Representation(_Options):
    """Base of walk representations.  ``b`` below is the compile's :class:`Builder` (its
    ``buffers`` hold this representation's model buffers), ``tree`` an i32 LIR expression,
    ``node`` a handle (i64), ``lane`` a Python int (0 untiled)."""

    #: The name users pass as ``rep=`` and ``--rep`` (unique among installed plugins).
    name: ClassVar[str] = ""
    #: Lays out tiles (see the module docstring).
    tiles: ClassVar[bool] = False

    #: Where set, :meth:`cost` is this factor times the core's estimate of its walks
    #: (:func:`silvanforge.lowering.walkcost.walk_estimate_ns`): 1.0 prices them as the estimate does.
    walk_cost_factor: ClassVar[float | None] = None

    #: Places untiled nodes in the order a profile gives (``Tree.tile_id`` at a tile size of one:
    #: :func:`silvanforge.frontend.tiling.hot_first_order`); others lay them out as they always do, and
    #: the tuner tries profiled forms of this representation only.
    node_order: ClassVar[bool] = False

    #: Trees one row's walk advances together where a batch is too small to interleave rows
    #: (the CPU default under 16 rows): a step's loads then wait on each other's latency in
    #: parallel, not in turn (measured 1.1-1.9x a 1-row call with child offsets loaded from
    #: memory); 1 walks the trees one after another (a layout whose walks gain nothing so).
    row_tree_lanes: ClassVar[int] = 8

    #: Lays trees out as *chains* where the layout asks (``ForestLayout.chain_lanes`` = L, the
    #: ``chainWalks`` directive): the trees of lane j (j, j + L, j + 2L...) side by side, each
    #: leaf's step going to the root of its lane's next tree (its last tree's to a *sink*, a
    #: split that steps to itself whatever the row), so a lane walks its trees back to back
    #: (:mod:`silvanforge.lowering.chains`).  Only where leaves loop on themselves (split rows,
    #: leaves inline): a leaf's step reads column -1 (NaN) and goes right, ``child + 1``.
    #: ``cache_trees`` is not asked of a chained layout (its trees are not in tree order).
    chains: ClassVar[bool] = False

    @classmethod
    def cost(cls, forest: Forest, target_kind: str, batch_size: int | None,
             options: Mapping | None = None) -> float | None:
        """Estimated ns a row of this representation's walks on ``forest`` (the cheapest
        installed representation is the default); None: only when asked for by name.  By
        default :attr:`walk_cost_factor` times the walks' estimate, or None without one.
        ``options``: the compile's options of this representation, where it lists
        :attr:`option_keys`.  A ``cost`` that also takes ``vectors`` is passed the vector unit
        the code is for (a :class:`silvanforge.target.Vectors`; None: the AVX-512 machine the
        shipped estimates were measured on), so the chooser picks per ISA."""
        if cls.walk_cost_factor is None:
            return None
        # A picosecond more keeps the factors' order where a forest has no steps (single leaves).
        return cls.walk_cost_factor * (walk_estimate_ns(forest, batch_size) + 1e-3)

    def buffers(self, forest: Forest, layout: ForestLayout) -> RepBuffers:
        """The model buffers of ``layout`` (the forest in the shared node encoding).  Raise
        :class:`UnsupportedModelError` with the reason where this layout cannot hold it."""
        raise NotImplementedError

    def root(self, b: Builder, tree: Expr) -> Expr:
        """The handle of tree ``tree``'s root."""
        raise NotImplementedError

    def load_threshold(self, b: Builder, tree: Expr, node: Expr, lane: int = 0) -> Expr:
        """The threshold of ``node`` (the layout's threshold dtype); for a categorical split, the
        offset of its bitset in ``layout.cat_bits`` as the layout gives it."""
        raise NotImplementedError

    def load_feature_index(self, b: Builder, tree: Expr, node: Expr, lane: int = 0) -> Expr:
        """The feature field of ``node`` as :attr:`TreeLayout.feature` holds it (an integer
        expression; the core widens and decodes it)."""
        raise NotImplementedError

    def load_split_flags(self, b: Builder, tree: Expr, node: Expr, lane: int = 0) -> Expr:
        """The flags byte of ``node`` (``FLAG_*``)."""
        raise NotImplementedError

    def load_tile_shape(self, b: Builder, tree: Expr, node: Expr) -> Expr:
        """The tile-shape id of tile ``node`` (representations with :attr:`tiles`)."""
        return Builder.const(0, "i32")

    def is_leaf(self, b: Builder, tree: Expr, node: Expr) -> Expr:
        """An i1 expression: ``node`` is a leaf."""
        raise NotImplementedError

    def leaf_value(self, b: Builder, tree: Expr, node: Expr, slot: Expr) -> Expr:
        """Output ``slot`` (an i32 expression; 0 for one-output trees) of leaf ``node``, in the
        accumulation dtype (``layout.leaf_values[leaf_slot + slot]``)."""
        raise NotImplementedError

    def child(self, b: Builder, tree: Expr, node: Expr, child: Expr) -> Expr:
        """The handle of child ``child`` (an i32 expression, 0 left, 1 right; for a tile, the
        child slot 0 .. tile size) of ``node``."""
        raise NotImplementedError

    def cache_trees(self, b: Builder, first_tree: Expr, num_trees: Expr) -> list[tuple[str, Expr, Expr]]:
        """Where trees ``first_tree`` .. ``first_tree + num_trees`` live: ``(buffer, start,
        stop)`` element ranges the target may prefetch or copy to shared memory; [] caches
        nothing."""
        return []


class FieldArrays(Representation):
    """A representation whose node fields are arrays named ``{prefix}_threshold``,
    ``{prefix}_feature`` and ``{prefix}_flags``, indexed by the node handle (untiled), leaves
    having a negative feature field as the layout gives it: the three loads and the leaf test
    come with it; the shipped layouts of whole-node arrays are written this way."""

    #: The arrays' name prefix (the representation's name, usually).
    prefix: ClassVar[str] = ""

    def load_threshold(self, b: Builder, tree: Expr, node: Expr, lane: int = 0) -> Expr:
        return b.load(f"{self.prefix}_threshold", node)

    def load_feature_index(self, b: Builder, tree: Expr, node: Expr, lane: int = 0) -> Expr:
        return Builder.cast(b.load(f"{self.prefix}_feature", node), "i32")

    def load_split_flags(self, b: Builder, tree: Expr, node: Expr, lane: int = 0) -> Expr:
        return b.load(f"{self.prefix}_flags", node)

    def is_leaf(self, b: Builder, tree: Expr, node: Expr) -> Expr:
        feature = b.load(f"{self.prefix}_feature", node)  # in the width it is stored in
        return Cmp("<", feature, Builder.const(0, feature.type))


class ProgramRepresentation(_Options):
    """Base of *program* representations: they evaluate trees their own way and build the whole
    LIR program from the model as imported (no HIR passes, no schedule, no walks), as
    ``plugins/rep_bitvector`` does.  Listed by ``silvanforge_representation_types`` like walk
    representations; one instance per compile."""

    name: ClassVar[str] = ""

    @classmethod
    def cost(cls, forest: Forest, target_kind: str, batch_size: int | None,
             options: Mapping | None = None) -> float | None:
        """Estimated ns a row of ``forest`` (one :meth:`refuses` does not refuse) on a
        ``target_kind`` target at ``batch_size`` (None: large batches); None: only when asked
        for by name.  ``options``: the
        compile's options of this representation, where it lists :attr:`option_keys`; ``vectors``
        where it takes it, as :meth:`Representation.cost`."""
        return None

    def program(self, forest: Forest, target_kind: str, batch_size: int | None) -> lir.Module:
        """The LIR module evaluating ``forest`` for rows given to its ``rows`` input buffer,
        margins written to its ``margins`` output buffer.  Raise :class:`InputError` with the
        reason where it cannot run this forest or this ``target_kind``.  A ``program`` that
        also takes ``vectors`` is passed the vector unit the code is for (as ``cost``), and
        may shape its blocks for it; the code itself must equal the reference on every one."""
        raise NotImplementedError


def check_class(cls) -> None:
    """Why a class a plugin lists is not a usable representation (raises PluginError)."""
    if not (isinstance(cls, type) and issubclass(cls, (Representation, ProgramRepresentation))):
        raise PluginError(f"{cls!r} is not a silvanforge.rep.Representation or ProgramRepresentation subclass")
    if not cls.name or not isinstance(cls.name, str):
        raise PluginError(f"representation class {cls.__qualname__} has no name")
    if issubclass(cls, ProgramRepresentation):
        base, required = ProgramRepresentation, ("program",)
    else:
        base, required = Representation, ("buffers", "root", "load_threshold", "load_feature_index",
                                          "load_split_flags", "is_leaf", "leaf_value", "child")
    missing = [m for m in required if getattr(cls, m) is getattr(base, m)]
    if missing:
        raise PluginError(f"representation {cls.name!r} ({cls.__qualname__}) does not implement "
                          f"{', '.join(missing)}")


@dataclasses.dataclass(frozen=True)
class ChosenWalks:
    """The walk representation a compile chose, as the core hands it to the target's default
    schedule (:meth:`silvanforge.target.Target.default_schedule`): what a schedule may suit to
    its walks, read from the representation itself rather than looked up again by name."""

    name: str
    cls: type  # its Representation class

    @property
    def row_tree_lanes(self) -> int:
        """Trees a row walks together in a tiny batch (:attr:`Representation.row_tree_lanes`)."""
        return max(1, int(self.cls.row_tree_lanes))

    @property
    def chains(self) -> bool:
        """Whether it lays trees out as chains (:attr:`Representation.chains`)."""
        return bool(getattr(self.cls, "chains", False))

    def estimate_ns(self, forest: Forest, target_kind: str, batch_size: int | None) -> float | None:
        """Its estimate, ns a row, for ``forest`` at ``batch_size`` (None where it refuses or
        does not say): :func:`price_of` with the defaults of its options."""
        return price_of(self.cls, forest, target_kind, batch_size)[0]
