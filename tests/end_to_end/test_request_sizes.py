"""benchmarks/request_sizes.py runs end to end on a small model; it measures, so nothing here
asserts a speed."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
from support_common import REPOSITORY

pytest.importorskip("xgboost")
pytest.importorskip("matplotlib")

SCRIPT = REPOSITORY / "benchmarks" / "request_sizes.py"


@pytest.fixture(scope="module")
def request_sizes():
    spec = importlib.util.spec_from_file_location("request_sizes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_quick_run_has_every_cell_and_the_plot(request_sizes, tmp_path, capsys):
    sizes, threads = [1, 16, 64], [1, 2]
    assert request_sizes.main(["--quick", "--models", "xgb_100x8", "--sizes", "1,16,64", "--threads", "1,2",
                               "--peers", "xgboost", "--out", str(tmp_path)]) == 0
    (result,) = json.loads((tmp_path / "request_sizes.json").read_text())
    cells = {(c["engine"], c["threads"], c["rows"]) for c in result["us_per_call"]}
    engines = {c[0] for c in cells}
    assert {"silvanforge", "xgboost"} <= engines
    if hasattr(__import__("silvanforge"), "tune"):  # the tuned artifact is timed where the API has it
        assert request_sizes.TUNED in engines
    assert cells == {(e, t, b) for e in engines for t in threads for b in sizes}
    assert all(c["us"] > 0 for c in result["us_per_call"])
    assert result["max_abs_diff"]["xgboost"] < 1e-6  # the peer predicts what we do
    table = (tmp_path / "request_sizes.md").read_text()
    for e in engines:
        for t in threads:
            row = next(line for line in table.splitlines() if line.startswith(f"| {t} | {e} |"))
            assert "-" not in [c.strip() for c in row.split("|")[3:3 + len(sizes)]], row
    assert "silvanforge / fastest peer" in table and "--quick" in table
    for t in threads:
        png = tmp_path / f"request_sizes_{t}t.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "xgb_100x8" in capsys.readouterr().out


def test_bad_options_are_one_error_line(request_sizes, tmp_path):
    for argv, what in ((["--models", "nope"], "unknown model"), (["--sizes", "0,4"], "--sizes"),
                       (["--peers", "nope"], "unknown peer")):
        with pytest.raises(SystemExit) as exc:
            request_sizes.main([*argv, "--out", str(tmp_path)])
        message = str(exc.value)
        assert message.startswith("error: ") and what in message and "\n" not in message


def test_forms_vs_tuned_shares_a_program_s_time_and_counts_the_cells():
    """The acceptance table of the plan: engines answering a size with one program are marked
    and counted by their shared time; the counts follow the 5% and 1.3x bars."""
    path = SCRIPT.with_name("forms_vs_tuned.py")
    spec = importlib.util.spec_from_file_location("forms_vs_tuned", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = {"model": "m", "threads": 1,
              "seconds": {"sparse@1": {1: 10e-6, 64: 90e-6}, "levelwise@64": {1: 30e-6, 64: 50e-6},
                          "untuned": {1: 14e-6, 64: 50e-6}, "tuned": {1: 10e-6, 64: 56e-6}},
              "programs": {"sparse@1": {1: "a", 64: "a"}, "levelwise@64": {1: "b", 64: "b"},
                           "untuned": {1: "c", 64: "b"}, "tuned": {1: "a", 64: "d"}}}
    text = module.table([result], [1, 64])
    rows = [line for line in text.splitlines() if line.startswith("| m |")]
    assert "| 1.00 (=) | 1.40 |" in rows[0]  # tuned runs sparse@1's program; untuned 1.4x it
    assert "| 1.12 | 0.89 |" in rows[1]  # another program, 12% slower than the fastest form
    assert "in 1 of 2 cells; untuned within 1.3x of tuned in 1 of 2." in text


def test_forms_vs_tuned_times_each_program_once_a_round():
    spec = importlib.util.spec_from_file_location("forms_vs_tuned", SCRIPT.with_name("forms_vs_tuned.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    engines = {"a": "A", "b": "B", "tuned": "T"}
    programs = {"a": {1: "x", 16: "x"}, "b": {1: "y", 16: "y"}, "tuned": {1: "x", 16: "z"}}
    calls = []
    clock = iter(range(100, 0, -1))  # every timing faster than the last

    def time_one(engine, rows):
        calls.append((engine, rows))
        return next(clock) * 1e-6

    seconds = module.timings(engines, programs, [1, 16], 3, time_one)
    assert sorted(calls[:6]) == sorted([("A", 1), ("B", 1)] * 3)  # one program, one timing a round
    assert len(calls) == 6 + 9
    assert seconds["tuned"][1] == seconds["a"][1] != seconds["b"][1]
    assert seconds["tuned"][16] != seconds["a"][16]
