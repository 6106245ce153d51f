"""Linear leaves (LightGBM's linear trees) in compiled code: the tables a layout holds, the code
that evaluates a leaf's model where a walk ends, and who may carry them.

The rule is :class:`silvanforge.ir.hir.LinearLeaves`'.  How it reaches the walks without a new
representation hook: for a forest with linear leaves the layout (:func:`silvanforge.lowering.layout.build_layout`)
stores, as the value of each leaf slot, that slot's row in the linear tables (an integer, exact
in the accumulation dtype), so a representation that returns ``layout.leaf_values`` entries as
laid out (:attr:`silvanforge.rep.Representation.linear_leaves`) hands the reduction the row, and
the core evaluates the model there (:func:`leaf_output`).  Trees without linear leaves in such a
forest get rows of their own: the constant is the leaf value, with no terms.

Where they cannot run: representations that do not say they carry them (their ``cost`` is
replaced by the reason, so the default choice skips them, and ``rep=`` names it), and targets
that do not say they evaluate them exactly (:attr:`silvanforge.target.Target.linear_leaves`: a
GPU compiler fuses the multiply and add unless told otherwise).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from silvanforge.ir import hir, lir
from silvanforge.ir.hir import ZERO_THRESHOLD
from silvanforge.ir.lir import Assign, Bin, Builder, Cast, Cmp, For, IsNan, Select, Var

# The model buffers of the tables (rows: leaf slots of the layout).
CONST, VALUE, BEGIN, FEATURE, COEFF = "linear_const", "linear_value", "linear_begin", "linear_feature", "linear_coeff"


@dataclasses.dataclass
class LinearTables:
    """One row a leaf slot of the layout: the model's constant, the plain leaf value (what a
    NaN among its features gives), and its terms ``begin[r] .. begin[r + 1] - 1``."""

    const: np.ndarray  # accumulation dtype
    value: np.ndarray  # accumulation dtype
    begin: np.ndarray  # int32, one more than rows
    feature: np.ndarray  # int32
    coeff: np.ndarray  # accumulation dtype

    @property
    def rows(self) -> int:
        return len(self.const)

    def buffers(self) -> dict[str, np.ndarray]:
        return {CONST: self.const, VALUE: self.value, BEGIN: self.begin, FEATURE: self.feature, COEFF: self.coeff}


def tables(forest: hir.Forest, leaf_dtype) -> LinearTables:
    """The tables of ``forest``, rows in the layout's leaf-slot order: trees in order, each
    tree's leaves in node order, each leaf's outputs in order."""
    dt = np.dtype(leaf_dtype)
    consts, values, sizes, features, coeffs = [], [], [], [], []
    for tree in forest.trees:
        leaves = np.flatnonzero(tree.left < 0)
        plain = tree.leaf_value[leaves].reshape(-1)
        values.append(plain)
        if tree.linear is None:
            consts.append(plain)
            sizes.append(np.zeros(len(plain), np.int64))
            continue
        # One output (hir.verify): a row a leaf.
        lin = tree.linear.take(leaves)
        consts.append(lin.const)
        sizes.append(np.diff(lin.begin))
        features.append(lin.feature)
        coeffs.append(lin.coeff)
    size = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
    return LinearTables(
        const=np.concatenate(consts or [np.zeros(0)]).astype(dt),
        value=np.concatenate(values or [np.zeros(0)]).astype(dt),
        begin=np.concatenate([[0], np.cumsum(size)]).astype(np.int32),
        # A zero entry past the end keeps the arrays non-empty (a buffer of no elements).
        feature=np.concatenate(features + [np.zeros(1, np.int32)]).astype(np.int32),
        coeff=np.concatenate(coeffs + [np.zeros(1)]).astype(dt),
    )


def exact_rows(rows: int, leaf_dtype) -> bool:
    """Whether every row number below ``rows`` is exact as a leaf value of ``leaf_dtype``."""
    return rows <= 2 ** (np.finfo(np.dtype(leaf_dtype)).nmant + 1)


def leaf_output(gen, row, value: lir.Expr) -> lir.Expr:
    """The value the leaf a walk reached contributes for ``row``: ``value`` is what the
    representation's ``leaf_value`` gave, the leaf's row in the tables (module docstring).
    ``gen``: the :class:`silvanforge.lowering.walkgen.WalkGenerator` emitting the reduction."""
    b, acc_t, thr_t = gen.b, gen.acc_t, gen.thr_t

    def c(v, t):
        return Builder.const(v, t)

    for name, data in gen.layout.linear.buffers().items():
        b.buffer(name, data)
    at = b.local("lrow", "i64", Cast(value, "i64"))
    acc = b.local("lacc", acc_t, b.load(CONST, at))
    missing = b.local("lnan", "i1", c(0, "i1"))
    term = Var(f"lt{len(b.locals)}", "i64")
    b.push()
    x = b.local("lx", thr_t, gen.input_value(row, b.load(FEATURE, term)))
    b.emit(Assign(missing, Bin("|", missing, IsNan(x))))
    tiny = Bin("&", Cmp(">=", x, c(-ZERO_THRESHOLD, thr_t)), Cmp("<=", x, c(ZERO_THRESHOLD, thr_t)))
    z = Builder.cast(Select(tiny, c(0.0, thr_t), x), acc_t)
    b.emit(Assign(acc, Bin("+", acc, Bin("*", b.load(COEFF, term), z))))
    body = b.pop()
    first = Cast(b.load(BEGIN, at), "i64")
    stop = Cast(b.load(BEGIN, Bin("+", at, c(1, "i64"))), "i64")
    b.emit(For(term, first, stop, 1, body))
    return Select(missing, b.load(VALUE, at), acc)


def refusal(cls, forest: hir.Forest) -> str | None:
    """Why representation class ``cls`` cannot run ``forest`` because of its linear leaves, or
    None (a forest without them, or a class that carries them)."""
    if getattr(cls, "linear_leaves", False) or not forest.has_linear():
        return None
    return "it does not carry linear leaves (LightGBM linear_tree)"


__all__ = ["LinearTables", "tables", "exact_rows", "leaf_output", "refusal"]
