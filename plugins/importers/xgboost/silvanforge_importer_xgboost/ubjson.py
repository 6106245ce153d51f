"""A small UBJSON decoder for XGBoost's binary model format (``save_model("m.ubj")``).

UBJSON (https://ubjson.org) is JSON with typed, big-endian binary values.  XGBoost writes
object keys as ``L``-length-prefixed bytes, numbers as ``d`` (float32) / ``L`` (int64), and
the large per-node arrays of a tree as *optimised* containers: ``[$<type>#<count>`` followed by
``count`` raw values, which this decoder turns into one NumPy array with ``np.frombuffer``.

:func:`decode` returns plain ``dict`` / ``list`` / ``str`` / ``int`` / ``float`` / ``bool`` /
``None`` values, and a 1-D NumPy array (native byte order) for each typed numeric array.  Any
malformed or truncated input raises :class:`UBJSONError` with the byte offset of the problem.
"""

from __future__ import annotations

import struct

import numpy as np

# Numeric type markers: struct format (big-endian) and NumPy dtype of the payload.
_NUMERIC = {
    b"i": (">b", np.dtype(">i1")),
    b"U": (">B", np.dtype(">u1")),
    b"I": (">h", np.dtype(">i2")),
    b"l": (">i", np.dtype(">i4")),
    b"L": (">q", np.dtype(">i8")),
    b"d": (">f", np.dtype(">f4")),
    b"D": (">d", np.dtype(">f8")),
}
_INTEGER_MARKERS = frozenset((b"i", b"U", b"I", b"l", b"L"))
_MAX_DEPTH = 200


class UBJSONError(ValueError):
    """The bytes are not valid (or are truncated) UBJSON."""


def decode(data: bytes) -> object:
    """Decode one UBJSON value that spans all of ``data`` (trailing no-ops are allowed)."""
    dec = _Decoder(memoryview(data))
    value = dec.value(dec.marker(), 0)
    while dec.pos < len(dec.buf) and bytes(dec.buf[dec.pos:dec.pos + 1]) == b"N":
        dec.pos += 1
    if dec.pos != len(dec.buf):
        raise UBJSONError(f"{len(dec.buf) - dec.pos} unexpected bytes after the value at offset {dec.pos}")
    return value


class _Decoder:
    def __init__(self, buf: memoryview):
        self.buf = buf
        self.pos = 0

    # -- low level -------------------------------------------------------------------------
    def take(self, n: int) -> memoryview:
        if n < 0:
            raise UBJSONError(f"negative length {n} at offset {self.pos}")
        end = self.pos + n
        if end > len(self.buf):
            raise UBJSONError(
                f"the data ends early: {n} bytes needed at offset {self.pos}, "
                f"{len(self.buf) - self.pos} left (truncated file?)"
            )
        out = self.buf[self.pos:end]
        self.pos = end
        return out

    def marker(self) -> bytes:
        """The next type marker, skipping no-op markers."""
        while True:
            m = bytes(self.take(1))
            if m != b"N":
                return m

    def number(self, m: bytes):
        fmt, _ = _NUMERIC[m]
        (v,) = struct.unpack(fmt, self.take(struct.calcsize(fmt)))
        return v

    def length(self) -> int:
        start = self.pos
        m = self.marker()
        if m not in _INTEGER_MARKERS:
            raise UBJSONError(f"expected an integer length at offset {start}, found marker {m!r}")
        n = self.number(m)
        if n < 0:
            raise UBJSONError(f"negative length {n} at offset {start}")
        return n

    def string(self) -> str:
        n = self.length()
        raw = self.take(n)
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UBJSONError(f"invalid UTF-8 in a string at offset {self.pos - n}: {exc.reason}") from None

    # -- values ----------------------------------------------------------------------------
    def value(self, m: bytes, depth: int):
        if m in _NUMERIC:
            return self.number(m)
        if m == b"S":
            return self.string()
        if m == b"H":  # high-precision number, stored as a string
            text = self.string()
            try:
                return int(text)
            except ValueError:
                try:
                    return float(text)
                except ValueError:
                    raise UBJSONError(f"invalid high-precision number {text!r}") from None
        if m == b"C":
            return bytes(self.take(1)).decode("latin-1")
        if m == b"T":
            return True
        if m == b"F":
            return False
        if m == b"Z":
            return None
        if m in (b"[", b"{"):
            if depth >= _MAX_DEPTH:
                raise UBJSONError(f"containers nested deeper than {_MAX_DEPTH} at offset {self.pos}")
            return self.array(depth + 1) if m == b"[" else self.object(depth + 1)
        raise UBJSONError(f"unknown type marker {m!r} at offset {self.pos - 1}")

    def _container_header(self):
        """Parse optional ``$type`` and ``#count`` after ``[`` or ``{``."""
        vtype = count = None
        peek = bytes(self.buf[self.pos:self.pos + 1])
        if peek == b"$":
            self.pos += 1
            vtype = bytes(self.take(1))
            if vtype == b"N" or (vtype not in _NUMERIC and vtype not in b"SHCTFZ[{"):
                raise UBJSONError(f"invalid container element type {vtype!r} at offset {self.pos - 1}")
            peek = bytes(self.buf[self.pos:self.pos + 1])
            if peek != b"#":
                raise UBJSONError(f"a typed container needs a count ('#') at offset {self.pos}")
        if peek == b"#":
            self.pos += 1
            count = self.length()
            # Every element but a typed number takes at least one byte (T / F / Z none, but
            # XGBoost never writes those): a larger count is corruption, not a big array.
            if vtype not in _NUMERIC and count > len(self.buf) - self.pos:
                raise UBJSONError(
                    f"a container claims {count} elements with {len(self.buf) - self.pos} bytes "
                    f"left at offset {self.pos} (truncated or corrupt file?)"
                )
        return vtype, count

    def array(self, depth: int):
        vtype, count = self._container_header()
        if count is None:
            out = []
            while True:
                m = self.marker()
                if m == b"]":
                    return out
                out.append(self.value(m, depth))
        if vtype in _NUMERIC:
            dtype = _NUMERIC[vtype][1]
            raw = self.take(count * dtype.itemsize)
            return np.frombuffer(raw, dtype=dtype, count=count).astype(dtype.newbyteorder("="))
        if vtype is not None:
            if vtype in (b"T", b"F", b"Z"):
                return [self.value(vtype, depth)] * count
            return [self.value(vtype, depth) for _ in range(count)]
        return [self.value(self.marker(), depth) for _ in range(count)]

    def object(self, depth: int):
        vtype, count = self._container_header()
        out = {}
        if count is None:
            while True:
                peek = bytes(self.buf[self.pos:self.pos + 1])
                if peek == b"N":
                    self.pos += 1
                    continue
                if peek == b"}":
                    self.pos += 1
                    return out
                key = self.string()
                out[key] = self.value(self.marker(), depth)
        for _ in range(count):
            key = self.string()
            out[key] = self.value(vtype if vtype is not None else self.marker(), depth)
        return out
