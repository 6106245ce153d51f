"""Artifacts: nothing damaged, mixed or unsigned runs; every failure is one ArtifactError line;
saves are atomic in threads and processes (silvanforge.artifact.archive)."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import threading
import warnings
import zipfile

import numpy as np
import pytest
from strategies import make_forest, rows_for

import silvanforge as sf
from silvanforge.artifact import archive
from silvanforge.runtime import reference


@pytest.fixture(scope="module")
def compiled():
    return sf.compile(make_forest(seed=3), rep="sparse")


@pytest.fixture(scope="module")
def rows(compiled):
    return rows_for(compiled.forest, np.random.default_rng(5), 300)


def _members(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def _rewrite(path, members: dict[str, bytes], compress=zipfile.ZIP_DEFLATED) -> None:
    with zipfile.ZipFile(path, "w", compression=compress) as z:
        for name, data in members.items():
            z.writestr(name, data)


def _fresh_manifest(members: dict[str, bytes], key: bytes | None = None) -> dict[str, bytes]:
    """What someone rewriting an artifact consistently would write."""
    import hashlib
    import hmac

    body = {n: d for n, d in members.items() if n not in ("manifest.json", "signature")}
    manifest = json.dumps({n: hashlib.sha256(d).hexdigest() for n, d in body.items()}, sort_keys=True).encode()
    body["manifest.json"] = manifest
    if key is not None:
        body["signature"] = hmac.new(key, manifest, hashlib.sha256).hexdigest().encode()
    return body


def _loads_code(path, **kwargs) -> bool:
    """Whether load_compiled ran the stored machine code (no LLVM compile happened)."""
    from silvanforge.plugins import registry

    calls = []
    target = registry().target("cpu")
    real = target.compile

    def spy(module, options):
        calls.append(1)
        return real(module, options)

    target.compile = spy  # on the instance: the registry hands out this one
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sf.ArtifactWarning)
            sf.load_compiled(path, **kwargs)
    finally:
        del target.compile
    return not calls


# ------------------------------------------------------------------ trust
def test_unsigned_code_is_not_run_and_the_model_is_compiled_again(tmp_path, compiled, rows):
    path = tmp_path / "m.forge"
    compiled.save(path)
    with pytest.warns(sf.ArtifactWarning, match="not signed"):
        back = sf.load_compiled(path)
    np.testing.assert_array_equal(back.predict(rows), compiled.predict(rows))
    assert not _loads_code(path)
    assert _loads_code(path, trust_code=True)


def test_signed_code_runs_for_the_key_holder_only(tmp_path, compiled, rows, monkeypatch):
    path = tmp_path / "m.forge"
    compiled.save(path, key="secret")
    assert _loads_code(path, key="secret")
    assert _loads_code(path, key=b"secret")
    assert not _loads_code(path, key="other")
    assert not _loads_code(path)
    monkeypatch.setenv(archive.KEY_ENV, "secret")
    assert _loads_code(path)
    np.testing.assert_array_equal(sf.load_compiled(path).predict(rows), compiled.predict(rows))
    env_signed = tmp_path / "env.forge"
    compiled.save(env_signed)  # signed with the environment's key
    monkeypatch.delenv(archive.KEY_ENV)
    assert _loads_code(env_signed, key="secret")


def test_replaced_machine_code_never_runs(tmp_path, compiled):
    """kernel.bin replaced (by anything: here another model's code) and the manifest rewritten
    to match: unsigned, so the code is not run; the meta's digest catches the swap anyway."""
    path = tmp_path / "m.forge"
    compiled.save(path, key="k")
    other = tmp_path / "o.forge"
    sf.compile(make_forest(num_outputs=1, seed=77), rep="sparse").save(other, key="k")
    members = _members(path)
    members["kernel.bin"] = _members(other)["kernel.bin"]
    _rewrite(path, _fresh_manifest(members))
    with pytest.raises(sf.ArtifactError, match="machine code is not the one"):
        sf.load_compiled(path, key="k")
    # rewritten without the key, the signature fails: the code would not run even if consistent
    members = _members(tmp_path / "o.forge")
    _rewrite(path, _fresh_manifest(members))
    assert not _loads_code(path, key="k")


# ------------------------------------------------------------------ damage
@pytest.mark.parametrize("member", ["meta.json", "forest.npz", "kernel.bin", "manifest.json"])
def test_a_changed_byte_in_any_member_is_refused(tmp_path, compiled, member):
    path = tmp_path / "m.forge"
    compiled.save(path)
    members = _members(path)
    data = bytearray(members[member])
    data[len(data) // 2] ^= 0x20
    members[member] = bytes(data)
    _rewrite(path, members)
    with pytest.raises(sf.ArtifactError):
        sf.load_compiled(path)


def test_damaged_files_are_one_line_errors(tmp_path, compiled):
    path = tmp_path / "m.forge"
    compiled.save(path)
    raw = path.read_bytes()
    cases = {
        "truncated": raw[: len(raw) // 2],
        "zeroed middle": raw[:200] + bytes(400) + raw[600:],
        "not a zip": b"PK\x03\x04" + b"\x00" * 100,
    }
    for what, data in cases.items():
        bad = tmp_path / f"{what}.forge"
        bad.write_bytes(data)
        with pytest.raises(sf.ArtifactError) as info:
            sf.load_compiled(bad)
        assert "\n" not in str(info.value), what
    # meta.json of the wrong shape, wrong types, not UTF-8 -- with a manifest that matches
    members = _members(path)
    for meta in (b"[1, 2]", b"\xff\xfe{", json.dumps({**json.loads(members["meta.json"]), "pad": "yes"}).encode(),
                 json.dumps({k: v for k, v in json.loads(members["meta.json"]).items() if k != "lir"}).encode()):
        _rewrite(path, _fresh_manifest({**members, "meta.json": meta}))
        with pytest.raises(sf.ArtifactError, match="meta.json"):
            sf.load_compiled(path)


def test_size_fields_are_checked_before_anything_is_allocated(tmp_path, compiled):
    path = tmp_path / "m.forge"
    compiled.save(path)
    members = _members(path)
    # an array header claiming 10**12 elements
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(members["forest.npz"])) as z:
        arrays = {n: z.read(n) for n in z.namelist()}
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (10**12,)})
    arrays["leaf_value.npy"] = header.getvalue() + b"\x00" * 64
    with zipfile.ZipFile(buf, "w") as z:
        for n, d in arrays.items():
            z.writestr(n, d)
    _rewrite(path, _fresh_manifest({**members, "forest.npz": buf.getvalue()}))
    with pytest.raises(sf.ArtifactError, match="claims 8000000000000 bytes"):
        sf.load_compiled(path)
    # meta.json padded to hundreds of megabytes (compressed to almost nothing)
    padded = members["meta.json"][:-1] + b" " * (64 << 20) + b"}"
    _rewrite(path, _fresh_manifest({**members, "meta.json": padded}))
    with pytest.raises(sf.ArtifactError, match="meta.json is .* bytes"):
        sf.load_compiled(path)
    assert path.stat().st_size < (1 << 20)


# ------------------------------------------------------------------ atomic saves
def test_saves_from_many_threads_leave_one_whole_artifact(tmp_path, compiled, rows):
    path = tmp_path / "m.forge"
    errors = []

    def save():
        try:
            compiled.save(path)
        except Exception as exc:  # noqa: BLE001 - collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=save) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(os.listdir(tmp_path)) == ["m.forge"]
    back = sf.load_compiled(path, trust_code=True)
    np.testing.assert_array_equal(back.predict(rows, output_margin=True),
                                  reference.predict(compiled.forest, rows, output_margin=True))


def _save_in_child(args):
    path, seed = args
    sf.compile(make_forest(seed=seed), rep="sparse").save(path)
    return seed


def test_saves_from_several_processes_leave_one_whole_artifact(tmp_path):
    path = str(tmp_path / "m.forge")
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        seeds = pool.map(_save_in_child, [(path, 3)] * 6)
    assert seeds == [3] * 6
    assert sorted(os.listdir(tmp_path)) == ["m.forge"]
    assert sf.load_model(path).fingerprint() == make_forest(seed=3).fingerprint()


# ------------------------------------------------------------------ private directories
def test_cache_directories_are_private_and_checked(tmp_path, monkeypatch):
    from silvanforge_bench.bench_peers import cache_root

    from silvanforge.artifact.userdirs import private_dir

    made = private_dir(tmp_path / "a" / "b")
    assert os.stat(made).st_mode & 0o777 == 0o700
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    with pytest.raises(sf.InputError, match="writable by other users"):
        private_dir(shared)
    (tmp_path / "target").mkdir()
    os.symlink(tmp_path / "target", tmp_path / "link")
    with pytest.raises(sf.InputError, match="not a directory"):
        private_dir(tmp_path / "link")
    # forge bench's built peer libraries: in the user's cache, never the shared temp directory
    monkeypatch.delenv("SILVANFORGE_BENCH_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    root = cache_root()
    assert root.startswith(str(tmp_path / "xdg")) and os.stat(root).st_mode & 0o777 == 0o700


def test_running_out_of_memory_while_compiling_is_one_line(monkeypatch):
    from silvanforge_rep_bitvector import bitvector

    from silvanforge.lowering import program

    def exhausted(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(program, "lower_to_lir", exhausted)
    monkeypatch.setattr(bitvector, "lower", exhausted)
    forest = make_forest(seed=4)
    with pytest.raises(sf.UnsupportedModelError, match="out of memory compiling a model of 30 trees") as info:
        sf.compile(forest)
    assert "\n" not in str(info.value)


def test_padded_prefixed_or_extended_artifacts_are_refused(tmp_path, compiled):
    path = tmp_path / "m.forge"
    compiled.save(path, key="k")
    raw = path.read_bytes()
    members = _members(path)
    cases = {"padded": raw + bytes(1000), "prefixed": b"junk" * 10 + raw}
    extended = tmp_path / "extended.forge"
    _rewrite(extended, {**members, "payload.bin": b"x" * 100_000})
    cases["extended"] = extended.read_bytes()
    for what, data in cases.items():
        bad = tmp_path / f"{what}.forge"
        bad.write_bytes(data)
        with pytest.raises(sf.ArtifactError):
            sf.load_compiled(bad, key="k")
    with pytest.raises(sf.InputError, match="empty"):
        sf.load_compiled(path, key="")


def test_artifact_bytes_are_named_not_echoed(compiled, tmp_path):
    path = tmp_path / "m.forge"
    compiled.save(path)
    with pytest.warns(sf.ArtifactWarning) as caught:
        sf.load_compiled(path.read_bytes())
    assert all(len(str(w.message)) < 400 for w in caught)
    assert "the artifact bytes" in str(caught[0].message)
