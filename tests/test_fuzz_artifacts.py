"""Mutated artifacts: every mutant is refused with one ArtifactError (or another SilvanForgeError)
or, where the change does not touch what predictions depend on, loads and predicts exactly as
the original.  Seeded mutators:

- raw: bit flips, byte runs overwritten, bytes inserted or deleted, truncation, over the whole
  file (the manifest catches any change to a member; the zip reader the rest);
- member: one member's bytes mutated and the manifest rewritten to match (what a careless or
  hostile edit does), loaded without trust: the stored code never runs, the model is compiled
  again from its arrays, so mutated options or arrays must be refused or be harmless.

``SILVANFORGE_FUZZ=N`` runs N mutants per kind (the default run: a few hundred in all).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import warnings
import zipfile
import zlib

import numpy as np
import pytest

import silvanforge as sf
from silvanforge.errors import SilvanForgeError
from strategies import rows_for
from test_predict_api import make_forest

COUNT = int(os.environ.get("SILVANFORGE_FUZZ", "0") or 0)
RAW = COUNT or 200
MEMBER = COUNT or 40  # per member


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    forest = make_forest(num_outputs=2, seed=5)
    forest.trees = forest.trees[:6]
    cf = sf.compile(forest, rep="sparse")
    path = tmp_path_factory.mktemp("fuzz") / "m.forge"
    cf.save(path)
    X = rows_for(forest, np.random.default_rng(2), 64)
    return path.read_bytes(), X, cf.predict(X)


def _mutate(rng: np.random.Generator, data: bytes) -> bytes:
    b = bytearray(data)
    kind = int(rng.integers(5))
    if not b:
        return bytes(rng.integers(0, 256, 8, dtype=np.uint8))
    at = int(rng.integers(len(b)))
    if kind == 0:  # flip bits
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(len(b)))
            b[i] ^= 1 << int(rng.integers(8))
    elif kind == 1:  # overwrite a run
        n = int(rng.integers(1, 16))
        b[at:at + n] = bytes(rng.integers(0, 256, n, dtype=np.uint8))
    elif kind == 2:  # insert
        b[at:at] = bytes(rng.integers(0, 256, int(rng.integers(1, 16)), dtype=np.uint8))
    elif kind == 3:  # delete
        del b[at:at + int(rng.integers(1, 16))]
    else:  # truncate
        del b[at:]
    return bytes(b)


def _outcome(data: bytes, X, want, path) -> str:
    path.write_bytes(data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sf.ArtifactWarning)
            cf = sf.load_compiled(path)
            got = cf.predict(X)
    except SilvanForgeError as exc:
        assert "\n" not in str(exc).strip(), str(exc)
        return "refused"
    np.testing.assert_array_equal(got, want)
    return "equal"


def test_raw_mutants_are_refused(original, tmp_path):
    data, X, want = original
    rng = np.random.default_rng(1)
    counts = {"refused": 0, "equal": 0}
    for _ in range(RAW):
        counts[_outcome(_mutate(rng, data), X, want, tmp_path / "raw.forge")] += 1
    # a changed byte anywhere is a changed member or a broken zip; only bytes zip readers skip
    # (timestamps, the comment field) may load, and then they predict the same
    assert counts["refused"] >= 0.9 * RAW, counts
    print(f"raw mutants: {counts}")


def _members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {n: z.read(n) for n in z.namelist()}


def _rezip(members: dict[str, bytes]) -> bytes:
    body = {n: d for n, d in members.items() if n not in ("manifest.json", "signature")}
    body["manifest.json"] = json.dumps({n: hashlib.sha256(d).hexdigest() for n, d in body.items()},
                                       sort_keys=True).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for n, d in body.items():
            z.writestr(n, d)
    return buf.getvalue()


@pytest.mark.parametrize("member", ["meta.json", "forest.npz", "kernel.bin", "program.json", "program.npz"])
def test_member_mutants_with_a_matching_manifest_are_refused_or_harmless(original, tmp_path, member):
    data, X, want = original
    members = _members(data)
    rng = np.random.default_rng(zlib.crc32(member.encode()))
    counts = {"refused": 0, "equal": 0}
    for _ in range(MEMBER):
        mutated = dict(members)
        mutated[member] = _mutate(rng, members[member])
        counts[_outcome(_rezip(mutated), X, want, tmp_path / "member.forge")] += 1
    if member == "kernel.bin":  # the options name the code's digest: a changed code is refused
        assert counts["equal"] == 0, counts
    print(f"{member} mutants: {counts}")
