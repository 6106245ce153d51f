"""Decompression bombs in artifacts: a small file whose members (or the arrays inside its
``.npz`` members) inflate to far more than real artifacts do is refused before it is inflated,
so loading it takes little memory (measured with tracemalloc, never a timing)."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import tracemalloc
import zipfile
import zlib

import numpy as np
import pytest

import silvanforge as sf
from silvanforge.artifact import archive
from strategies import make_forest

MB = 1 << 20
BOMB = 768 * MB  # what a member claims; deflated to under 1 MB
MEMORY_BOUND = 100 * MB


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    path = tmp_path_factory.mktemp("bombs") / "m.forge"
    sf.compile(make_forest(seed=3), rep="sparse").save(path)
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def _zeros_deflated(size: int, prefix: bytes = b"") -> bytes:
    """A raw deflate stream of ``prefix`` and then zeros, ``size`` bytes in all, made without
    ever holding them: after a full flush, each megabyte of zeros deflates to the same block."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    zeros = bytes(MB)
    first = c.compress(prefix + bytes(MB - len(prefix))) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    assert c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH) == block
    return first + block * (size // MB - 2) + block + c.flush()


def _zip(entries: list[tuple]) -> bytes:
    """A zip of (name, method, data as stored, inflated size[, CRC-32]): what a hostile writer
    makes, sizes and all.  A bomb's CRC is left 0: the loader must refuse before reaching it."""
    out, central = bytearray(), bytearray()
    for name, method, data, size, *crc in entries:
        n, crc = name.encode(), crc[0] if crc else 0
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0x21, crc,
                               len(data), size, len(n), 0, 0, 0, 0, 0, len(out)) + n
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data), size,
                           len(n), 0) + n + data
    return bytes(out + central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries),
                                             len(central), len(out), 0))


def _deflated(name: str, data: bytes) -> tuple:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return name, zipfile.ZIP_DEFLATED, c.compress(data) + c.flush(), len(data), zlib.crc32(data)


def _manifest(members: dict[str, bytes]) -> dict[str, bytes]:
    body = {n: d for n, d in members.items() if n not in ("manifest.json", "signature")}
    return {**body, "manifest.json": json.dumps({n: hashlib.sha256(d).hexdigest() for n, d in body.items()},
                                                sort_keys=True).encode()}


def _peak_while_refused(path, match: str) -> int:
    tracemalloc.start()
    try:
        with pytest.raises(sf.ArtifactError, match=match):
            sf.load_compiled(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_member_that_inflates_past_the_budget_is_refused_before_inflating(tmp_path, members):
    # forest.npz replaced by hundreds of megabytes of zeros; the manifest left stale.
    entries = [_deflated(n, d) for n, d in members.items() if n != "forest.npz"]
    entries.append(("forest.npz", zipfile.ZIP_DEFLATED, _zeros_deflated(BOMB), BOMB))
    path = tmp_path / "bomb.forge"
    path.write_bytes(_zip(entries))
    assert path.stat().st_size < MB
    assert _peak_while_refused(path, "would inflate to") < MEMORY_BOUND


def test_an_array_inside_an_npz_that_inflates_past_the_budget_is_refused(tmp_path, members):
    # A consistent, unsigned artifact whose forest.npz holds one array of hundreds of megabytes
    # (deflated inside the .npz, which the artifact deflates again).
    with zipfile.ZipFile(io.BytesIO(members["forest.npz"])) as z:
        inner = [(n, zipfile.ZIP_STORED, d, len(d), zlib.crc32(d)) for n, d in
                 ((n, z.read(n)) for n in z.namelist())]
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False,
                                                  "shape": ((BOMB - 128) // 8,)})
    prefix = header.getvalue()
    size = len(prefix) + (BOMB - 128) // 8 * 8
    inner = [e for e in inner if e[0] != "leaf_value.npy"] + [
        ("leaf_value.npy", zipfile.ZIP_DEFLATED, _zeros_deflated(BOMB, prefix), BOMB)]
    assert size <= BOMB
    npz = _zip(inner)
    path = tmp_path / "nested.forge"
    path.write_bytes(_zip([_deflated(n, d) for n, d in _manifest({**members, "forest.npz": npz}).items()]))
    assert path.stat().st_size < MB
    assert _peak_while_refused(path, "arrays of forest.npz would inflate") < MEMORY_BOUND


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_members_compressed_past_deflate_are_refused(tmp_path, members, method):
    path = tmp_path / "m.forge"
    with zipfile.ZipFile(path, "w", compression=method) as z:
        for n, d in members.items():
            z.writestr(n, d)
    with pytest.raises(sf.ArtifactError, match="compressed with method"):
        sf.load_compiled(path)


def test_the_budget_can_be_raised_for_artifacts_one_trusts(tmp_path, members, monkeypatch):
    path = tmp_path / "m.forge"
    path.write_bytes(_zip([_deflated(n, d) for n, d in members.items()]))
    monkeypatch.setenv(archive.MAX_INFLATE_ENV, "1000")
    with pytest.raises(sf.ArtifactError, match=archive.MAX_INFLATE_ENV):
        sf.load_compiled(path)
    monkeypatch.delenv(archive.MAX_INFLATE_ENV)
    with pytest.warns(sf.ArtifactWarning):  # unsigned: compiled again, but loads
        sf.load_compiled(path)
