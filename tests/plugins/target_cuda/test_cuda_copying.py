"""The CUDA target's row-copy setting (silvanforge_target_cuda.copying): checked, set for a block
and restored, the environment's default outside; importable without a GPU or pycuda."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

import silvanforge as sf

copying = pytest.importorskip("silvanforge_target_cuda.copying")


def test_copy_settings_apply_to_the_block_and_are_restored(monkeypatch):
    monkeypatch.delenv("SILVANFORGE_CUDA_COPY", raising=False)
    assert copying.current() == copying.CopySettings("pageable", 1 << 22)
    with copying.copy_settings(copy="registered", register_min_bytes=4096) as inside:
        assert copying.current() == inside == copying.CopySettings("registered", 4096)
        with copying.copy_settings(copy="staged"):  # nested: one field changed, the other kept
            assert copying.current() == copying.CopySettings("staged", 4096)
        seen = []
        worker = threading.Thread(target=lambda: seen.append(copying.current()))
        worker.start()
        worker.join()
        assert seen == [copying.CopySettings("pageable", 1 << 22)]  # another thread: its own
    assert copying.current().copy == "pageable"
    with pytest.raises(RuntimeError):
        with copying.copy_settings(copy="staged"):
            raise RuntimeError("the block fails")
    assert copying.current().copy == "pageable"  # restored all the same


def test_the_environment_sets_the_default(monkeypatch):
    monkeypatch.setenv("SILVANFORGE_CUDA_COPY", "staged")
    assert copying.current().copy == "staged"
    monkeypatch.setenv("SILVANFORGE_CUDA_COPY", "fast")
    with pytest.raises(sf.InputError, match="one of pageable, staged, registered"):
        copying.current()


@pytest.mark.parametrize("changes, says", [
    ({"copy": "zero-copy"}, "one of pageable"), ({"register_min_bytes": -1}, "non-negative"),
    ({"register_min_bytes": 1.5}, "non-negative"), ({"register_min_bytes": True}, "non-negative"),
    ({"pinned": True}, "unknown CUDA copy settings: pinned")])
def test_bad_settings_are_refused(changes, says):
    with pytest.raises(sf.InputError, match=says):
        with copying.copy_settings(**changes):
            pass


def test_importing_the_setting_loads_no_cuda_library():
    code = ("import sys, silvanforge_target_cuda.copying; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pycuda', 'cupy', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
