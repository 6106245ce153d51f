"""LightGBM's model text as arrays: its lines, its space-separated lists of numbers parsed a
field at a time over every tree by one NumPy call where they are plain, and set bits of its
category bitsets found for many ranges at once (a pattern match a list, and a scan a node, took
most of a 1000-tree 255-leaf model's load)."""

from __future__ import annotations

import itertools
import re
import warnings

import numpy as np

I64 = np.iinfo(np.int64)
DIGITS = b"0123456789"
EOL = re.compile(r"\r\n|\r|\n")
OTHER_EOL = "\v\f\x1c\x1d\x1e"  # str.splitlines' other line ends in ASCII


def split_lines(text: str) -> tuple[list[int], list[str]]:
    """LightGBM's lines (ending at \\n, \\r\\n or \\r) and the byte offset each starts at."""
    if text.isascii() and not any(c in text for c in OTHER_EOL):  # a scan in C each
        # str.splitlines (in C) ends lines where LightGBM does when no other line boundary of
        # Python's is in the text; ASCII: a character is a byte.
        ended = text.splitlines(keepends=True)
        offsets = list(itertools.accumulate((len(line) for line in ended), initial=0))
        lines = [line.rstrip("\r\n") for line in ended]
        if text and text[-1] not in "\r\n":
            offsets.pop()  # the last line has no end: no line after it
        else:
            lines.append("")
        return offsets, lines
    offsets, lines = [], []
    pos = at = 0
    while True:
        m = EOL.search(text, pos)
        line = text[pos:] if m is None else text[pos:m.start()]
        offsets.append(at)
        lines.append(line)
        if m is None:
            return offsets, lines
        at += len(line.encode("utf-8")) + (m.end() - m.start())
        pos = m.end()


def plain_lists(texts: list[str], dtype) -> list[np.ndarray] | None:
    """The lists ``texts`` parsed by one NumPy call over them all, an array each, or None
    unless each is plain: numbers of ``dtype`` as LightGBM writes them (``[+-]?digits``
    integers; decimal numbers, ``inf`` and ``nan``) one space apart, or empty (a stump's).
    Such lists hold no character and no sign the patterns (:data:`.lightgbm_text._INT`, :data:`.lightgbm_text._FLOAT`) would
    not place there, and each number reads as one: NumPy reads them as ``int()`` and
    ``float()`` do, and refuses (or reads as two) anything else of those characters (checked in
    the tests).  (A pattern match a list took a fifth of a 1000-tree 255-leaf model's load.)"""
    joined = " ".join(text for text in texts if text)
    if not joined.isascii():
        return None
    data = joined.encode("ascii")
    if not data:
        return [np.zeros(0, dtype) for _ in texts]
    if data.translate(None, DIGITS + (b" +-" if dtype is np.int64 else b" +-.eEinfa")) or b"  " in data \
            or data[0] == 32 or data[-1] == 32:
        return None
    codes = np.frombuffer(data, np.uint8)
    signs = np.flatnonzero((codes == ord("+")) | (codes == ord("-")))
    if len(signs):
        after = codes[np.minimum(signs + 1, len(codes) - 1)]
        before = codes[np.maximum(signs - 1, 0)]
        # a sign starts a number (or an exponent) and is followed by its digits (or its point, or
        # inf or nan)
        starts = (signs == 0) | np.isin(before, np.frombuffer(b" " if dtype is np.int64 else b" eE", np.uint8))
        then = np.isin(after, np.frombuffer(DIGITS if dtype is np.int64 else DIGITS + b".in", np.uint8))
        if not (starts & then & (signs + 1 < len(codes))).all():
            return None
    counts = [text.count(" ") + 1 if text else 0 for text in texts]
    ends = list(itertools.accumulate(counts))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (NumPy's older releases warn where they stop reading)
            arr = np.fromstring(data, dtype=dtype, sep=" ")
    except (ValueError, DeprecationWarning):
        return None
    if len(arr) != ends[-1]:
        return None
    if dtype is np.int64 and (arr.max() == I64.max or arr.min() == I64.min):
        return None  # (clamped, maybe: the checked path reads it)
    return [arr[end - count:end] for end, count in zip(ends, counts)]


def within(counts: np.ndarray) -> np.ndarray:
    """0, 1, ... counts[0] - 1, then 0, 1, ... counts[1] - 1, and so on."""
    return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)


def set_bits(words: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> list[np.ndarray]:
    """For each range [lo, hi) of bit positions of ``words`` (32-bit words, a word's bits from
    its lowest), the positions of its set bits less lo (int64): a search a range over all the
    set bits, not a scan of each range's words."""
    set_bits = np.flatnonzero(np.unpackbits(words.astype("<u4").view(np.uint8), bitorder="little"))
    first = np.searchsorted(set_bits, lo)
    counts = np.searchsorted(set_bits, hi) - first
    ends = np.cumsum(counts)
    found = (set_bits[within(counts) + np.repeat(first, counts)] - np.repeat(lo, counts)).astype(np.int64)
    return [found[end - count:end] for end, count in zip(ends.tolist(), counts.tolist())]
