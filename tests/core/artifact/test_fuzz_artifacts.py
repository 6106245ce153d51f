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
from strategies import make_forest, rows_for

COUNT = int(os.environ.get("SILVANFORGE_FUZZ", "0") or 0)
RAW = COUNT or 200
MEMBER = COUNT or 25  # per member


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


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """An artifact with a plan of three forms of three representations."""
    from silvanforge.options import CompileOptions
    from silvanforge.plan.tuning import compile_plan

    forest = make_forest(num_outputs=1, seed=7)
    cf = compile_plan(forest, [(2, CompileOptions(rep="sparse", batch_size=1, pad=False)),
                               (20, CompileOptions(rep="array", batch_size=16)),
                               (None, CompileOptions(rep="reorg"))])
    path = tmp_path_factory.mktemp("fuzz") / "p.forge"
    cf.save(path)
    members = _members(path.read_bytes())
    assert "plan.json" in members and len(json.loads(members["plan.json"])["forms"]) > 1
    X = rows_for(forest, np.random.default_rng(3), 40)
    return members, X, cf.predict(X)


def _edited_plans(plan: dict, rng: np.random.Generator, count: int):
    """Hostile edits of plan.json: each of the issue's cases, then random fields set to random
    JSON values (numbers out of range, Infinity, strings, paths, nesting)."""
    other = next(i for i, f in enumerate(plan["forms"]) if f is not None)

    def form(**change):
        p = json.loads(json.dumps(plan))
        p["forms"][other].update(change)
        return p

    yield {**plan, "bands": [[1, 3, 1], [4, float("inf"), 2]]}
    yield {**plan, "given": "x"}
    yield {**plan, "given": {"batch_size": -1}}
    yield form(target="cuda")
    yield form(batch_size=-5)
    yield form(tile_size=1e9)
    yield form(tile_size=10**9)
    yield form(rep="../../etc")
    yield form(threads=0)
    values = [None, -1, 0, 1, 2**63, -2**63, 1e308, float("inf"), float("nan"), "", "x", "../../etc",
              [], {}, [[1, None, 0]], {"batch_size": "x"}, True]
    fields = ["bands", "given", "main", "forms", "tuning", "batch_size", "tile_size", "rep", "target",
              "threads", "schedule", "pad", "lir", "cpu", "node_order"]
    for _ in range(count):
        p = json.loads(json.dumps(plan))
        field = fields[int(rng.integers(len(fields)))]
        value = values[int(rng.integers(len(values)))]
        if field in p:
            p[field] = value
        else:
            p["forms"][other][field] = value
        yield p


@pytest.mark.parametrize("trust", [False, True])
def test_edited_plans_are_one_artifact_error_or_harmless(planned, tmp_path, trust):
    """An edited plan.json (the manifest fixed to match, which anyone can do to an unsigned
    artifact) is refused with one ArtifactError, trusted or not, or predicts as the original;
    the cases the hostile probe found are refused."""
    members, X, want = planned
    plan = json.loads(members["plan.json"])
    counts = {"refused": 0, "equal": 0}
    for k, edited in enumerate(_edited_plans(plan, np.random.default_rng(4), MEMBER)):
        path = tmp_path / "plan.forge"
        path.write_bytes(_rezip({**members, "plan.json": json.dumps(edited).encode()}))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", sf.ArtifactWarning)
                got = sf.load_compiled(path, trust_code=trust).predict(X)
        except sf.ArtifactError as exc:
            assert "\n" not in str(exc).strip(), str(exc)
            counts["refused"] += 1
            continue
        assert k >= 9, f"the hostile case {k} loaded: {edited}"
        np.testing.assert_array_equal(got, want)
        counts["equal"] += 1
    print(f"edited plans (trust_code={trust}): {counts}")
