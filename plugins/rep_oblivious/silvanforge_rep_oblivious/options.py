"""The oblivious representation's options: the keys of ``CompileOptions.rep_options`` it reads,
and the levelwise representation too (the same program's spans and chunks; ``auto_choose``
off leaves both to ``rep=``).

    sf.compile(model, options=sf.CompileOptions(rep_options={"oblivious_auto_choose": False}))

Each key names the representation because ``rep_options`` is one mapping for every installed
representation (the bitvector representation's ``auto_choose`` is its own).  The compiled model
records them with its other options (``meta.json``, ``forge show``); an unknown key or a value of
the wrong kind is an InputError naming it.

- ``oblivious_auto_choose`` (bool, default True): whether the CPU default may choose this
  representation by its cost; False leaves it to ``rep="oblivious"``.
- ``oblivious_chunk_bytes`` (int, default 16 KiB): the leaf tables a chunk of trees may hold
  (at most 256 trees).  Forests whose tables pass it run in spans of rows, each span's blocks
  running one chunk of trees before the next, so a chunk's tables stay in L1 beside its leaf
  indices for every block of the span (:func:`.cost.span`; 16 KiB: 1000 trees of depth 8 1.29x,
  300 of depth 6 1.33x over one chunk of 256 KiB, 4096-row calls; 8 KiB was slower).
- ``oblivious_span_rows`` (int, default 512): rows a span (fewer where the span's columns would
  pass 128 KiB of stack, or the call brings fewer rows).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from silvanforge.errors import InputError


@dataclasses.dataclass(frozen=True)
class ObliviousOptions:
    """The options above, checked (:meth:`from_mapping`), by their names without the prefix."""

    auto_choose: bool = True
    chunk_bytes: int = 16 << 10
    span_rows: int = 512

    @classmethod
    def from_mapping(cls, options: Mapping | None) -> ObliviousOptions:
        """The options ``options`` gives (keys of this representation's only), checked."""
        if not options:
            return DEFAULT
        unknown = sorted(set(options) - set(OPTION_KEYS))
        if unknown:
            raise InputError(f"the oblivious representation takes no option {unknown[0]!r} "
                             f"(its options: {', '.join(OPTION_KEYS)})")
        value = options.get(PREFIX + "auto_choose", True)
        if not isinstance(value, bool):
            raise InputError(f"the oblivious option {PREFIX}auto_choose must be True or False, got {value!r}")
        for name in ("chunk_bytes", "span_rows"):
            value = options.get(PREFIX + name, 1)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"the oblivious option {PREFIX}{name} must be a positive integer, got {value!r}")
        return cls(**{key[len(PREFIX):]: value for key, value in options.items()})


PREFIX = "oblivious_"
DEFAULT = ObliviousOptions()
OPTION_KEYS = tuple(PREFIX + f.name for f in dataclasses.fields(ObliviousOptions))

__all__ = ["ObliviousOptions", "DEFAULT", "OPTION_KEYS"]
