"""The user's own artifact key: the first save makes it (0600, in a 0700 directory); artifacts
this user saved load their machine code without recompiling, in a fresh process too; another
key's or an unsigned artifact compiles again; a key file others can read or write is refused;
``forge key show|rotate|export`` manage it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import warnings

import numpy as np
import pytest

import silvanforge as sf
from silvanforge.artifact import userkey
from strategies import make_forest
from support_cli import forge, wide_console  # noqa: F401  (an autouse fixture)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """The per-user key on, kept in a config directory of this test's own."""
    monkeypatch.setenv(userkey.ENABLE_ENV, "1")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(userkey.KEY_FILE_ENV, raising=False)
    monkeypatch.delenv("SILVANFORGE_ARTIFACT_KEY", raising=False)
    return tmp_path


@pytest.fixture(scope="module")
def compiled():
    return sf.compile(make_forest(seed=3))


def _loads_code(path, **kwargs) -> bool:
    """Whether loading ``path`` ran its saved code (no ArtifactWarning: nothing compiled again)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", sf.ArtifactWarning)
        sf.load_compiled(path, **kwargs)
    return not any(issubclass(w.category, sf.ArtifactWarning) for w in caught)


def test_the_first_save_makes_a_private_key_and_own_artifacts_load_their_code(home, compiled, tmp_path):
    assert userkey.load() is None
    compiled.save(tmp_path / "m.forge")
    where = userkey.path()
    assert where.startswith(str(home / "config"))
    assert stat.S_IMODE(os.stat(where).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(where)).st_mode) == 0o700
    assert _loads_code(tmp_path / "m.forge")
    X = np.random.default_rng(0).normal(size=(30, compiled.num_features))
    np.testing.assert_array_equal(sf.load_compiled(tmp_path / "m.forge").predict(X), compiled.predict(X))


def test_a_fresh_process_loads_the_users_artifact_without_compiling(home, compiled, tmp_path):
    compiled.save(tmp_path / "m.forge")
    code = ("import warnings, silvanforge as sf\n"
            "warnings.simplefilter('error', sf.ArtifactWarning)\n"
            f"sf.load_compiled({str(tmp_path / 'm.forge')!r})\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_another_keys_or_no_keys_artifacts_compile_again(home, compiled, tmp_path, monkeypatch):
    compiled.save(tmp_path / "other.forge", key="someone else's key")
    assert not _loads_code(tmp_path / "other.forge")
    assert _loads_code(tmp_path / "other.forge", key="someone else's key")
    monkeypatch.setenv(userkey.ENABLE_ENV, "0")
    compiled.save(tmp_path / "unsigned.forge")
    monkeypatch.setenv(userkey.ENABLE_ENV, "1")
    assert not _loads_code(tmp_path / "unsigned.forge")


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620])
def test_a_key_others_can_read_or_write_is_refused(home, compiled, tmp_path, mode):
    """Refused: a save stops with why; a load reads every artifact as unsigned (compiled again,
    or its code run where trusted) and says why, so pickles and trusted loads still work."""
    compiled.save(tmp_path / "m.forge")
    os.chmod(userkey.path(), mode)
    with pytest.raises(sf.InputError, match="chmod 600"):
        compiled.save(tmp_path / "n.forge")
    with pytest.warns(sf.ArtifactWarning) as seen:
        sf.load_compiled(tmp_path / "m.forge")
    said = " ".join(str(w.message) for w in seen)
    assert "can be read or written by others" in said and "compiling its model again" in said
    with pytest.warns(sf.ArtifactWarning, match="read as unsigned"):
        sf.load_compiled(tmp_path / "m.forge", trust_code=True)


def test_forge_says_a_refused_key_once_as_a_note(home, compiled, tmp_path, capsys):
    """The key is read when the artifact is checked and again when it loads: the CLI says it
    once, as a note (it printed Python's warning with a source line, then the note)."""
    X = np.random.default_rng(1).normal(size=(5, compiled.num_features)).astype(np.float32)
    np.save(tmp_path / "x.npy", X)
    leaves = compiled.predict(X, pred_leaf=True)  # (its leaf model kept in the artifact: read too)
    compiled.save(tmp_path / "m.forge")
    os.chmod(userkey.path(), 0o644)
    for extra, want in (((), compiled.predict(X)), (("--leaf", "--trust-code"), leaves)):
        code, out, err = forge(capsys, "predict", tmp_path / "m.forge", "-i", tmp_path / "x.npy", *extra)
        assert code == 0, err
        lines = err.splitlines()
        assert all(line.startswith("note: ") for line in lines), err
        assert sum("can be read or written by others" in line for line in lines) == 1, err
        np.testing.assert_allclose(np.loadtxt(out.splitlines(), delimiter=",", ndmin=1).reshape(-1),
                                   np.asarray(want, dtype=np.float64).reshape(-1), rtol=1e-6)


def test_no_place_for_a_key_saves_unsigned_and_a_missing_fleet_key_is_an_error(home, compiled, tmp_path, capsys,
                                                                               monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", "/proc/no-such-place")
    with pytest.warns(sf.ArtifactWarning, match="cannot make your artifact key.*saved unsigned"):
        compiled.save(tmp_path / "m.forge")
    with pytest.warns(sf.ArtifactWarning, match="not signed"):
        sf.load_compiled(tmp_path / "m.forge")
    monkeypatch.setenv(userkey.KEY_FILE_ENV, str(tmp_path / "not-mounted" / "fleet.key"))
    with pytest.raises(sf.InputError, match="does not exist"):
        compiled.save(tmp_path / "n.forge")
    assert not (tmp_path / "n.forge").exists()
    code, out, _ = forge(capsys, "key", "show")  # (not "the first save makes one": it does not)
    assert code == 0 and "no key there (SILVANFORGE_KEY_FILE): provision the fleet's key there" in out, out


def test_rotate_and_export(home, compiled, tmp_path, capsys, monkeypatch):
    code, out, err = forge(capsys, "key", "show")
    assert code == 0 and "no key yet" in out
    compiled.save(tmp_path / "m.forge")
    code, out, _ = forge(capsys, "key", "show")
    first = userkey.fingerprint(userkey.load())
    assert code == 0 and first in out
    code, exported, _ = forge(capsys, "key", "export")
    assert code == 0 and exported.strip().encode() == userkey.load()
    code, out, _ = forge(capsys, "key", "rotate")
    assert code == 0 and first not in out and userkey.fingerprint(userkey.load()) in out
    assert stat.S_IMODE(os.stat(userkey.path()).st_mode) == 0o600
    assert not _loads_code(tmp_path / "m.forge")  # signed with the old key: compiled again
    # a fleet: the exported key as SILVANFORGE_ARTIFACT_KEY on another host loads the artifact
    monkeypatch.setenv(userkey.ENABLE_ENV, "0")
    monkeypatch.setenv("SILVANFORGE_ARTIFACT_KEY", exported.strip())
    assert _loads_code(tmp_path / "m.forge")


def test_a_key_file_of_a_fleet_and_the_switch(home, compiled, tmp_path, capsys, monkeypatch):
    fleet = tmp_path / "fleet.key"
    fleet.write_text("ab" * 32 + "\n")
    os.chmod(fleet, 0o600)
    monkeypatch.setenv(userkey.KEY_FILE_ENV, str(fleet))
    compiled.save(tmp_path / "m.forge")
    assert userkey.load() == ("ab" * 32).encode()
    assert _loads_code(tmp_path / "m.forge")
    fleet.write_text("not a key\n")
    with pytest.raises(sf.InputError, match="does not hold a key"):
        userkey.load()
    monkeypatch.setenv(userkey.ENABLE_ENV, "0")
    code, _, err = forge(capsys, "key", "rotate")
    assert code != 0 and err.count("error:") == 1 and "off" in err
