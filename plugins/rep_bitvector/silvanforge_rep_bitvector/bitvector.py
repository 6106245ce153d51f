"""Bitvector evaluation (QuickScorer, Lucchese et al., SIGIR 2015, applied tree by tree to a
block of rows in SIMD lanes): the ``bitvector`` representation.

Instead of walking each tree node by node, every tree keeps words of bits, one bit per leaf
(leaf ``k`` from the left is bit ``63 - k % 64`` of word ``k // 64``), all set at the start.  A
split the row does *not* take to the left (a "false" node) clears the bits of the leaves in its
left subtree; once every node of the tree has been applied, its exit leaf is the leftmost leaf
whose bit is still set: a leading-zero count.  ``LANES`` (or ``WIDE_LANES``) rows are evaluated
together, one per vector lane, and a tree's word stays in a register while its nodes are
applied, so a node costs one vector compare and one masked AND, with no branch and no memory
write, whatever the tree's shape: this pays where trees are small beside their depth (real
data's leaf-wise and mixed-depth trees, :func:`pays`), and is what the CPU default chooses
there.  Each tree's exit leaf is kept and the leaf values are summed after all trees: in model
order, as the reference does.

Two forms of one program (:func:`lower`): *expanded* trees have every node's compare and AND
emitted with its threshold and mask as constants; *looped* trees are applied by loops over node
tables, which compile in constant time and run about 1.5x slower a node (plugins/rep_bitvector/README.md,
"Bitvector evaluation").  The smallest trees are expanded, up to ``expand_nodes`` nodes in all
(an option, :mod:`.options`: compile time grows with them), and the rest looped.

Exact like the walks: every node becomes "goes right iff ``x >= t``" with ``t`` the threshold
(``x < t`` splits) or the next representable value above it (``x <= t`` splits, exact for every
``x`` of the comparison dtype).  ``x >= t`` is false for NaN, so missing values go left; a node
whose missing values go right reads a copy of its feature where NaN is +inf, above every
other threshold.  LightGBM's NaN-or-not splits (``x <= +inf``) send every number left:
dropped where missing values go left too, else read from a NaN indicator copy (+inf for NaN,
0 for numbers).

Limits (:func:`unsupported`, the walk then runs): at most ``MAX_LEAVES`` leaves a tree, categorical
splits (decision tables, :class:`.plan.CatFeature`) of at most ``MAX_CATEGORY_TABLE_BYTES``, numeric
``<`` / ``<=`` splits with non-NaN thresholds, no zero-as-missing, summed or averaged trees (trees
adding to several outputs run as one tree an output: :func:`.support.single_output`).

Where each part lives: :mod:`.leafbits` (leaves as bits of words), :mod:`.support` (what it can
run, the forest's facts), :mod:`.choose` (the forms' choice and the cost model), :mod:`.plan`
(words, chunks, decision tables, the model buffers), :mod:`.codegen` (the LIR), and
:mod:`.masktables` (the mask-table form).  This module is the representation's face: the
functions the plugin class and its users call.
"""

from __future__ import annotations

from .choose import cost_ns, estimate_ns, pays
from .codegen import NAME, lower
from .support import unsupported

__all__ = ["NAME", "unsupported", "cost_ns", "estimate_ns", "pays", "lower"]
