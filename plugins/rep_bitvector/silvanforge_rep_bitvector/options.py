"""The bitvector representation's options: the keys of ``CompileOptions.rep_options`` it reads.

    sf.compile(model, options=sf.CompileOptions(rep_options={"mask_tables": False}))

Each changes the program a compile builds, so a compiled model records them with its other
options (``meta.json``, ``forge show``); an unknown key or a value of the wrong kind is an
InputError naming it.

- ``auto_choose`` (bool, default True): whether the CPU default may choose this representation
  by its cost; False leaves it to ``rep="bitvector"``.
- ``mask_tables`` (bool or None, default None): the mask-table form (:mod:`.masktables`) where
  estimated cheaper (None), for every tree wherever it can run (True), or never (False).
- ``expand_nodes`` (int, default 6000): at most this many nodes are expanded as code, the
  smallest trees first (-1: none, every tree looped).  Expanded code compiles in about 0.4 ms a
  node (6000: about 2.5 s); the smallest trees gain the most a node.
- ``narrow`` (bool or None, default None): the narrow form (16-bit bins, 32-bit words) for wide
  blocks where the bins fit (None), for every block, 8-lane ones too, where they fit (True), or
  never (False: float compares of 64-bit words).
- ``narrow_word`` (int or None, default None): the narrow form's words, 8 or 32 bits; None
  takes them by vector unit and cost (:func:`.choose.narrow_word`).
- ``narrow_max_bins`` (int, default 32767): the narrow form is taken where every feature's
  thresholds make at most this many bins.
- ``narrow_max_bin_bytes`` (int, default 16 MiB): ... and where the bins' search table (a row a
  used feature) takes at most this many bytes.
- ``block_rows`` (int, default 4096, at least 256, a power of two): rows a block of the mask-table
  form (fewer where the block's keys or sums would not fit the stack).  On taxi 1000x255 (tables
  from L3) blocks of 512 rows ran 1.2x slower than blocks of 4096.
- ``decision_chunk_bytes`` (int, default 8 KiB, at least 1): a block's categorical decision
  words are gathered a chunk of trees at a time, at most this many bytes (a word a lane), so
  that they stay in L1 beside the columns: gathering every tree's words first took 26 KiB a
  block on a 100-tree insurance-shaped model of 255 leaves and 845 KiB on a 1000-tree
  flight-shaped one.
- ``tabled_trees`` (str or None, default None): the trees the mask tables evaluate, as their
  indices in model order separated by commas (``"0,3,7"``; ``""``: none), the node forms taking
  the rest; None leaves it to ``mask_tables``.  A tree of vector leaves counts once an output
  (:func:`.support.single_output`).  Trees the mask tables cannot run are an InputError.  For
  measuring one split of the trees against another, and for tests of the mixed form.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from silvanforge.errors import InputError


@dataclasses.dataclass(frozen=True)
class BitvectorOptions:
    """The options above, checked (:meth:`from_mapping`)."""

    auto_choose: bool = True
    mask_tables: bool | None = None
    expand_nodes: int = 6000
    narrow: bool | None = None
    narrow_word: int | None = None
    narrow_max_bins: int = 2**15 - 1
    narrow_max_bin_bytes: int = 16 << 20
    block_rows: int = 4096
    decision_chunk_bytes: int = 8 * 1024
    tabled_trees: str | None = None

    @classmethod
    def from_mapping(cls, options: Mapping | None) -> BitvectorOptions:
        """The options ``options`` gives (keys of this representation's only), checked."""
        if options is None:
            return DEFAULT
        if isinstance(options, BitvectorOptions):
            return options
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InputError(f"the bitvector representation takes no option {unknown[0]!r} "
                             f"(its options: {', '.join(sorted(known))})")
        for name in ("auto_choose", "mask_tables", "narrow"):
            value = options.get(name)
            if name in options and not isinstance(value, bool) and not (name != "auto_choose" and value is None):
                raise InputError(f"bitvector option {name} must be True or False"
                                 f"{'' if name == 'auto_choose' else ' or None'}, got {value!r}")
        for name in ("expand_nodes", "narrow_max_bins", "narrow_max_bin_bytes", "block_rows", "decision_chunk_bytes"):
            value = options.get(name, 0)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"bitvector option {name} must be an integer, got {value!r}")
        word = options.get("narrow_word")
        if word is not None and (type(word) is not int or word not in (8, 32)):
            raise InputError(f"bitvector option narrow_word must be 8, 32 or None, got {word!r}")
        if options.get("decision_chunk_bytes", 1) < 1:
            raise InputError(f"bitvector option decision_chunk_bytes must be 1 or more, "
                             f"got {options['decision_chunk_bytes']}")
        if options.get("narrow_max_bin_bytes", 0) < 0:
            raise InputError(f"bitvector option narrow_max_bin_bytes must be 0 or more, "
                             f"got {options['narrow_max_bin_bytes']}")
        if options.get("tabled_trees") is not None:
            if options.get("mask_tables") is not None:
                raise InputError("bitvector options mask_tables and tabled_trees both choose the trees the mask "
                                 "tables take: give one")
            _tree_indices(options["tabled_trees"])
        if "expand_nodes" in options and options["expand_nodes"] < -1:
            raise InputError(f"bitvector option expand_nodes must be -1 or more, got {options['expand_nodes']}")
        if "narrow_max_bins" in options and not 0 <= options["narrow_max_bins"] <= 2**15 - 1:
            raise InputError("bitvector option narrow_max_bins must be from 0 to 32767 (16-bit bins), "
                             f"got {options['narrow_max_bins']}")
        rows = options.get("block_rows", 4096)
        if rows < 256 or rows & (rows - 1):
            raise InputError(f"bitvector option block_rows must be a power of two of at least 256, got {rows}")
        return cls(**options)

    def tabled(self) -> tuple[int, ...] | None:
        """The trees ``tabled_trees`` names (None where it is not given)."""
        return None if self.tabled_trees is None else _tree_indices(self.tabled_trees)


def _tree_indices(text) -> tuple[int, ...]:
    """The tree indices of a ``tabled_trees`` value: distinct, each 0 or more."""
    if not isinstance(text, str):
        raise InputError(f"bitvector option tabled_trees must be tree indices separated by commas "
                         f"(a string such as \"0,3,7\"), got {text!r}")
    parts = [p.strip() for p in text.split(",")] if text.strip() else []
    if not all(p.isdigit() for p in parts):
        raise InputError(f"bitvector option tabled_trees must be tree indices separated by commas, got {text!r}")
    indices = tuple(int(p) for p in parts)
    if len(set(indices)) != len(indices):
        raise InputError(f"bitvector option tabled_trees names a tree twice: {text!r}")
    return indices


DEFAULT = BitvectorOptions()
OPTION_KEYS = tuple(f.name for f in dataclasses.fields(BitvectorOptions))

__all__ = ["BitvectorOptions", "DEFAULT", "OPTION_KEYS"]
