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
- ``narrow_max_bins`` (int, default 32767): the narrow form (16-bit bins, 32-bit words) is taken
  where every feature's thresholds make at most this many bins.
- ``block_rows`` (int, default 4096, at least 256, a power of two): rows a block of the mask-table
  form (fewer where the block's keys or sums would not fit the stack).  On taxi 1000x255 (tables
  from L3) blocks of 512 rows ran 1.2x slower than blocks of 4096.
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
    narrow_max_bins: int = 2**15 - 1
    block_rows: int = 4096

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
        for name in ("auto_choose", "mask_tables"):
            value = options.get(name)
            if name in options and not isinstance(value, bool) and not (name == "mask_tables" and value is None):
                raise InputError(f"bitvector option {name} must be True or False"
                                 f"{' or None' if name == 'mask_tables' else ''}, got {value!r}")
        for name in ("expand_nodes", "narrow_max_bins", "block_rows"):
            value = options.get(name, 0)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"bitvector option {name} must be an integer, got {value!r}")
        if "expand_nodes" in options and options["expand_nodes"] < -1:
            raise InputError(f"bitvector option expand_nodes must be -1 or more, got {options['expand_nodes']}")
        if "narrow_max_bins" in options and not 0 <= options["narrow_max_bins"] <= 2**15 - 1:
            raise InputError("bitvector option narrow_max_bins must be from 0 to 32767 (16-bit bins), "
                             f"got {options['narrow_max_bins']}")
        rows = options.get("block_rows", 4096)
        if rows < 256 or rows & (rows - 1):
            raise InputError(f"bitvector option block_rows must be a power of two of at least 256, got {rows}")
        return cls(**options)


DEFAULT = BitvectorOptions()
OPTION_KEYS = tuple(f.name for f in dataclasses.fields(BitvectorOptions))

__all__ = ["BitvectorOptions", "DEFAULT", "OPTION_KEYS"]
