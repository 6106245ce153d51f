"""``forge serve --workers N``: several server processes on one port (silvanforge_serve.workers).

Each test starts the command in a process of its own (bound to 127.0.0.1, a port the system
picks), with bounded waits and request loops, and leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
if not hasattr(os, "fork"):
    pytest.skip("--workers needs os.fork", allow_module_level=True)

from silvanforge.errors import InputError, SilvanForgeError  # noqa: E402
from silvanforge_serve.workers import check_workers, run_workers  # noqa: E402
from support_common import REPOSITORY  # noqa: E402

MODEL = REPOSITORY / "examples" / "model.json"


def _start(*args: str, session: bool = False) -> tuple[subprocess.Popen, str]:
    """``forge serve MODEL --workers ...`` started; (the process, its URL) once it listens."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from silvanforge.cli import main; sys.exit(main())",
                             "serve", str(MODEL), "--port", "0", "--host", "127.0.0.1", "--log-level", "warning",
                             *args], stderr=subprocess.PIPE, text=True, start_new_session=session)
    line = ""
    for _ in range(50):  # bounded: the command prints where it listens once the model is ready
        line = proc.stderr.readline()
        if "serving" in line or not line:
            break
    assert "http://127.0.0.1:" in line, line
    return proc, "http://127.0.0.1:" + line.split("http://127.0.0.1:")[1].split()[0]


def _workers_answering(url: str, want: int, tries: int = 400) -> dict[int, float]:
    """The processes answering on ``url`` (pid -> the prediction each gave for one row), asked on
    a new connection each time until ``want`` of them answered (bounded)."""
    row = [[0.25, -1.0, 0.5, 2.0, np.nan, 0.0, 1.5, -0.5]]
    body = {"data": [[None if v != v else v for v in row[0]]]}
    seen: dict[int, float] = {}
    for _ in range(tries):
        with httpx.Client(base_url=url, timeout=10) as http:  # (a connection of its own: any worker takes it)
            pid = http.get("/health").json()["process"]
            seen[pid] = http.post("/predict", json=body).json()["predictions"][0]
        if len(seen) >= want:
            break
    return seen


def _gone(pids, timeout: float = 15.0) -> bool:
    """Whether every process of ``pids`` has ended (bounded wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive:
            return True
        time.sleep(0.1)
    return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def _expected() -> float:
    import xgboost as xgb

    row = np.array([[0.25, -1.0, 0.5, 2.0, np.nan, 0.0, 1.5, -0.5]], dtype=np.float32)
    return float(xgb.Booster(model_file=str(MODEL)).inplace_predict(row)[0])


def test_workers_share_the_port_answer_as_the_library_and_stop_on_sigterm():
    proc, url = _start("--workers", "2")
    try:
        answers = _workers_answering(url, want=2)
        assert len(answers) == 2, answers  # both workers took connections
        assert os.getpid() not in answers and proc.pid not in answers  # (the parent only supervises)
        for value in answers.values():
            assert value == pytest.approx(_expected(), rel=1e-6)
        proc.send_signal(signal.SIGTERM)
        # every worker stops, then the parent ends as SIGTERM would (as one server does)
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
        assert _gone(answers)
        assert "Traceback" not in proc.stderr.read()
    finally:
        _stop(proc)


def test_a_worker_killed_is_replaced_and_workers_stop_when_their_parent_is_killed():
    proc, url = _start("--workers", "2")
    try:
        first = _workers_answering(url, want=2)
        victim = next(iter(first))
        os.kill(victim, signal.SIGKILL)
        line = ""
        for _ in range(20):  # bounded: the parent says what happened and starts another
            line = proc.stderr.readline()
            if "ended" in line or not line:
                break
        assert f"worker {victim} ended (signal SIGKILL); starting another" in line, line
        now = {}
        for _ in range(40):  # bounded: the replacement answers once it has started
            now = _workers_answering(url, want=2, tries=50)
            if len(now) == 2 and victim not in now:
                break
            time.sleep(0.1)
        assert len(now) == 2 and victim not in now, (first, now)
        proc.kill()  # the parent killed outright: its workers stop by themselves
        proc.wait(10)
        assert _gone(now)
    finally:
        _stop(proc)


def test_ctrl_c_stops_every_worker_and_says_stopped():
    proc, url = _start("--workers", "2", session=True)
    try:
        answers = _workers_answering(url, want=2)
        os.killpg(proc.pid, signal.SIGINT)  # (a terminal's Ctrl-C reaches its whole group)
        assert proc.wait(timeout=30) == 0
        err = proc.stderr.read()
        assert "stopped" in err and "Traceback" not in err, err
        assert _gone(answers)
    finally:
        _stop(proc)


def test_workers_that_fail_as_they_start_stop_the_server_with_one_error(capfd):
    def serve_one(worker: int):
        raise ValueError(f"worker {worker} cannot start")

    with pytest.raises(SilvanForgeError, match="within a second of starting"):
        run_workers(serve_one, 2)
    assert "cannot start" in capfd.readouterr().err  # each worker's own error, where it failed


def test_workers_need_fork_and_at_least_one(monkeypatch, capsys):
    from silvanforge import cli

    check_workers(1)
    monkeypatch.delattr(os, "fork")
    with pytest.raises(InputError, match="os.fork"):
        check_workers(2)
    check_workers(1)  # (one worker: no fork)
    monkeypatch.undo()
    assert cli.main(["serve", str(MODEL), "--port", "0", "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err
