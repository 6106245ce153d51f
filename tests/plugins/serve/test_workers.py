"""``forge serve --workers N``: several server processes on one port (silvanforge_serve.workers).

Each test starts the command in a process of its own (bound to 127.0.0.1, a port the system
picks), with bounded waits and request loops, and leaves no process behind."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
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


class _Served:
    """``forge serve MODEL --workers ...`` in a process group of its own: its URL once it
    listens, its stderr read by a thread (every wait bounded), and :meth:`close` stopping the
    whole group (workers included) and closing the pipe."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from silvanforge.cli import main; sys.exit(main())", "serve",
             str(MODEL), "--port", "0", "--host", "127.0.0.1", "--log-level", "warning", *args],
            stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.lines: queue.Queue = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        line = self.line_with("serving", timeout=120)
        assert "http://127.0.0.1:" in line, line
        self.url = "http://127.0.0.1:" + line.split("http://127.0.0.1:")[1].split()[0]

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put(None)

    def line_with(self, text: str, timeout: float = 30) -> str:
        """The next line of stderr holding ``text`` ("" where none came in ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            if text in line:
                return line
        return ""

    def rest(self) -> str:
        """What the process wrote after the lines read (it has ended)."""
        self.reader.join(10)
        out = []
        while not self.lines.empty():
            line = self.lines.get()
            if line is not None:
                out.append(line)
        return "".join(out)

    def __enter__(self) -> "_Served":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
        self.reader.join(10)
        self.proc.stderr.close()


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


def _group_gone(group: int, timeout: float = 15.0) -> bool:
    """Whether every process of process group ``group`` has ended (bounded wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def _expected() -> float:
    import xgboost as xgb

    row = np.array([[0.25, -1.0, 0.5, 2.0, np.nan, 0.0, 1.5, -0.5]], dtype=np.float32)
    return float(xgb.Booster(model_file=str(MODEL)).inplace_predict(row)[0])


def test_workers_share_the_port_answer_as_the_library_and_stop_on_sigterm():
    with _Served("--workers", "2") as served:
        answers = _workers_answering(served.url, want=2)
        assert len(answers) == 2, answers  # both workers took connections
        assert served.proc.pid not in answers  # (the parent only supervises)
        for value in answers.values():
            assert value == _expected()  # (exactly: the float32 value, as JSON carries it)
        served.proc.send_signal(signal.SIGTERM)
        # every worker stops, then the parent ends as SIGTERM would (as one server does)
        assert served.proc.wait(timeout=30) in (0, -signal.SIGTERM)
        assert _gone(answers)
        assert "Traceback" not in served.rest()


def test_a_signal_as_the_workers_start_stops_them_all():
    # (held back across each fork: a signal at once after the command listens stops every worker
    # it started, and the command ends; 130: Ctrl-C before the workers were forked)
    for stop in (signal.SIGTERM, signal.SIGINT, signal.SIGTERM):
        with _Served("--workers", "3") as served:
            served.proc.send_signal(stop)
            assert served.proc.wait(timeout=30) in (0, 130, -signal.SIGTERM)
            assert _group_gone(served.proc.pid)  # no worker left behind


def test_a_worker_killed_is_replaced_and_workers_stop_when_their_parent_is_killed():
    with _Served("--workers", "2") as served:
        first = _workers_answering(served.url, want=2)
        victim = next(iter(first))
        os.kill(victim, signal.SIGKILL)
        line = served.line_with("ended")
        assert f"worker {victim} ended (signal SIGKILL); starting another" in line, line
        now = {}
        for _ in range(40):  # bounded: the replacement answers once it has started
            now = _workers_answering(served.url, want=2, tries=50)
            if len(now) == 2 and victim not in now:
                break
            time.sleep(0.1)
        assert len(now) == 2 and victim not in now, (first, now)
        served.proc.kill()  # the parent killed outright: its workers stop by themselves
        served.proc.wait(10)
        assert _gone(now)


def test_ctrl_c_stops_every_worker_and_says_stopped():
    with _Served("--workers", "2") as served:
        answers = _workers_answering(served.url, want=2)
        os.killpg(served.proc.pid, signal.SIGINT)  # (a terminal's Ctrl-C reaches its whole group)
        assert served.proc.wait(timeout=30) == 0
        err = served.rest()
        assert "stopped" in err and "Traceback" not in err, err
        assert _gone(answers)


def test_a_second_server_on_the_port_is_refused_not_joined():
    with _Served("--workers", "2") as served:
        port = served.url.rsplit(":", 1)[1]
        for workers in ("2", "1"):
            other = subprocess.run(
                [sys.executable, "-c", "import sys; from silvanforge.cli import main; sys.exit(main())", "serve",
                 str(MODEL), "--port", port, "--host", "127.0.0.1", "--workers", workers],
                capture_output=True, text=True, timeout=120)
            assert other.returncode == 1 and "cannot listen on 127.0.0.1:" in other.stderr, other.stderr
            assert "Traceback" not in other.stderr


def test_workers_that_fail_as_they_start_stop_the_server_with_one_error(capfd):
    def serve_one(worker: int):
        raise ValueError(f"worker {worker} cannot start")

    with pytest.raises(SilvanForgeError, match="workers keep failing: 5 workers ended in 10 s"):
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
    with pytest.raises(InputError, match="compiled for the CPU"):  # (a GPU context does not survive a fork)
        check_workers(2, "gpu")
    check_workers(1, "gpu")
    assert cli.main(["serve", str(MODEL), "--port", "0", "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err
