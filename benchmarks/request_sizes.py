"""Microseconds per call at every request size, ours and every installed peer, per model.

    python benchmarks/request_sizes.py --out DIR [--models a,b] [--sizes 1,16,64,256,4096]
        [--threads 1,2] [--repeat 3] [--peers a,b] [--all-peers] [--tune-budget S] [--cpu NAME] [--quick]

For each model of request_size_models.py (trained into DIR/models on the first run) this runs
``forge bench``'s own machinery (silvanforge_bench.run_bench: the same peers, the same random rows,
each size's calls rotating through fresh rows so no branch predictor learns them) with ours
compiled once for any batch size, as a service compiles it; where ``silvanforge.tune`` exists, the
artifact ``sf.tune`` keeps (one plan for every request size, ``--tune-budget`` seconds of tuning
per model and thread count) is timed on the same rotations.  It prints and
writes DIR/request_sizes.md (us per call, and ours / fastest peer) and DIR/request_sizes.json,
and plots us per row against rows per call (log-log, one panel per model, one line per engine)
into DIR/request_sizes_<N>t.png per thread count.  ``--cpu NAME`` compiles and tunes ours for
that CPU (``sf.compile``'s ``cpu``: x86-64-v3, znver3, ...; the peers build for this host), to
measure what code for a fleet's CPU costs here.  ``--quick`` trains small models and times
briefly: a smoke test, not a measurement.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # request_size_models and the data it reuses

DEFAULT_SIZES = (1, 16, 64, 256, 4096)
TUNED = "silvanforge (tuned)"
QUICK_TUNE_S = 3.0  # --quick: a short tuning (sf.tune keeps the untuned forms however short)


@dataclasses.dataclass
class ModelResult:
    name: str
    what: str
    shape: str  # trees, depth, features, outputs as the bench read them
    timings: dict[tuple[str, int, int], float]  # (engine, threads, rows) -> seconds per call
    max_diffs: dict[str, float]  # engine -> max abs difference from ours
    notes: list[str]
    engines: list[str]


def _tuned_timings(model: Path, sizes, threads, repeat, min_time, budget_s, say,
                   cpu: str | None = None) -> tuple[dict, float | None, str | None]:
    """(timings, max diff from ours, note) of ``sf.tune``'s artifact, when the API has it."""
    import silvanforge as sf

    if not hasattr(sf, "tune"):
        return {}, None, None
    from silvanforge.frontend.loading import load_model
    from silvanforge.testing import random_rows
    from silvanforge_bench.bench import compare
    from silvanforge_bench.bench_peers import time_call
    from silvanforge_bench.bench_peers._timing import pool_rows, rotation

    forest = load_model(str(model))
    expected_on = sf.compile(forest).predict  # ours untuned: what the tuned artifact must predict
    row_bytes = forest.num_features * np.dtype(forest.threshold_dtype).itemsize
    pool = random_rows(forest, pool_rows(max(sizes), row_bytes), 0)  # run_bench's rows (seed 0)
    timings, worst = {}, 0.0
    for t in threads:
        say(f"tuning for {t} thread{'s' * (t != 1)}")
        try:
            cf = sf.tune(str(model), rows=None, threads=t, budget_s=budget_s, cpu=cpu)
        except Exception as exc:  # noqa: BLE001 - a tuner failure is a note, the table stays
            return {}, None, f"{TUNED}: failed ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
        worst = max(worst, compare(expected_on(pool[:max(sizes)]), cf.predict(pool[:max(sizes)]))[0])
        for b in sizes:
            timings[(TUNED, t, b)] = time_call(cf.predict, rotation(pool, b), repeat, min_time)
    return timings, worst, None


def measure_model(spec, path: Path, sizes, threads, repeat: int, min_time: float, peers, all_peers: bool,
                  cache_dir: Path, say=print, tune_budget: float | None = None, cpu: str | None = None) -> ModelResult:
    from silvanforge_bench import bench

    skipped = {} if all_peers else dict(spec.slow_peers)
    wanted = None if peers is None and not skipped else [
        p[0] for p in bench.PEERS if (peers is None or p[0] in peers) and p[0] not in skipped]
    started = time.perf_counter()
    report = bench.run_bench(path, sizes, threads=list(threads), repeat=repeat, min_time=min_time,
                             peers=wanted, compile_batch="none", cache_dir=str(cache_dir), cpu=cpu,
                             progress=lambda what, done, total: say(f"{spec.name}: {what} ({done}/{total})"))
    timings = {(m.engine, m.threads, m.batch_size): m.seconds for m in report.measurements}
    diffs = {m.engine: m.max_abs_diff for m in report.measurements if m.max_abs_diff is not None}
    notes = list(report.notes) + [f"{p}: not run on this model ({why}; --all-peers runs it)"
                                  for p, why in skipped.items() if peers is None or p in peers]
    engines = report.engines()

    tuned, diff, note = _tuned_timings(path, sizes, threads, repeat, min_time, tune_budget, say, cpu)
    if tuned:
        timings.update(tuned)
        diffs[TUNED] = diff
        engines.insert(1, TUNED)
    if note:
        notes.append(note)
    say(f"{spec.name}: measured in {time.perf_counter() - started:.0f} s")
    shape = (f"{report.trees} trees, max depth {report.max_depth}, {report.features} features, "
             f"{report.outputs} output{'s' * (report.outputs != 1)}")
    return ModelResult(spec.name, spec.what, shape, timings, diffs, notes, engines)


def measure(models, out: Path, sizes=DEFAULT_SIZES, threads=(1, 2), repeat: int = 3, quick: bool = False,
            peers=None, all_peers: bool = False, say=print, on_result=None,
            tune_budget: float | None = None, cpu: str | None = None) -> list[ModelResult]:
    """Train (or reuse) and time every model in ``models`` (names of request_size_models.MODELS);
    ``on_result(results so far)`` after each model (a long run stopped early keeps its tables)."""
    from request_size_models import BY_NAME, model_path

    results = []
    for name in models:
        spec = BY_NAME[name]
        path = model_path(spec, out, quick, say)
        results.append(measure_model(spec, path, sizes, threads, repeat, 0.0 if quick else 0.1, peers,
                                     all_peers, out / "peer-cache", say, tune_budget, cpu))
        if on_result is not None:
            on_result(results)
    return results


# --------------------------------------------------------------------------- output
def _peers_of(result: ModelResult) -> list[str]:
    return [e for e in result.engines if not e.startswith("silvanforge")]


def speedup(result: ModelResult, ours: str, threads: int, rows: int) -> tuple[float, str] | None:
    """(fastest peer's time / ours, that peer) at ``rows`` and ``threads``; >1: ours is faster."""
    mine = result.timings.get((ours, threads, rows))
    peers = [(result.timings[(p, threads, rows)], p) for p in _peers_of(result)
             if (p, threads, rows) in result.timings]
    if mine is None or not peers:
        return None
    best, who = min(peers)
    return best / mine, who


def to_markdown(results: list[ModelResult], sizes, threads) -> str:
    head = "| threads | engine | " + " | ".join(f"{b} rows" for b in sizes) + " | max abs diff vs ours |"
    rule = "|---:|---|" + "---:|" * len(sizes) + "---:|"
    parts = []
    for r in results:
        parts += [f"#### {r.name}: {r.what}", "", f"{r.shape}. Microseconds per call (best of the runs).", "",
                  head, rule]
        for t in threads:
            for e in r.engines:
                cells = [f"{r.timings[(e, t, b)] * 1e6:,.1f}" if (e, t, b) in r.timings else "-" for b in sizes]
                diff = r.max_diffs.get(e)
                parts.append(f"| {t} | {e} | " + " | ".join(cells) + f" | {'' if diff is None else f'{diff:.2g}'} |")
            for ours in [e for e in r.engines if e.startswith("silvanforge")]:
                cells = []
                for b in sizes:
                    s = speedup(r, ours, t, b)
                    cells.append("-" if s is None else f"{s[0]:.2f}x ({s[1]})")
                parts.append(f"| {t} | **{ours} / fastest peer** | " + " | ".join(cells) + " | |")
        parts.append("")
        parts += [f"- {n}" for n in r.notes]
        parts.append("")
    parts.append("Ratios are the fastest peer's time over ours: above 1, ours is faster.")
    return "\n".join(parts) + "\n"


def plot(results: list[ModelResult], sizes, threads: int, png: Path) -> None:
    """us per row against rows per call, log-log: one panel per model, one line per engine."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    cols = min(4, len(results))
    rows = -(-len(results) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    engines = list(dict.fromkeys(e for r in results for e in r.engines))
    colors = {e: plt.cm.tab10(i % 10) for i, e in enumerate(engines)}
    for ax, r in zip(axes.flat, results):
        for e in r.engines:
            xs = [b for b in sizes if (e, threads, b) in r.timings]
            ys = [r.timings[(e, threads, b)] * 1e6 / b for b in xs]
            ours = e.startswith("silvanforge")
            ax.plot(xs, ys, marker="o", markersize=3, label=e, color=colors[e], linewidth=2.2 if ours else 1.2,
                    linestyle="-" if ours else "--")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(list(sizes), [str(b) for b in sizes])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_title(r.name, fontsize=9)
        ax.set_xlabel("rows per call", fontsize=8)
        ax.set_ylabel("us per row", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(results):]:
        ax.axis("off")
    handles = [plt.Line2D([], [], color=colors[e], linewidth=2.2 if e.startswith("silvanforge") else 1.2,
                          linestyle="-" if e.startswith("silvanforge") else "--", label=e) for e in engines]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(engines), 5), fontsize=8, frameon=False)
    fig.suptitle(f"Microseconds per row by request size, {threads} thread{'s' * (threads != 1)}", fontsize=10)
    fig.tight_layout(rect=(0, 0.04 + 0.02 * ((len(engines) - 1) // 5), 1, 0.97))
    fig.savefig(png, dpi=80)  # small enough to keep in docs/img
    plt.close(fig)


def write_outputs(results: list[ModelResult], out: Path, sizes, threads, command: str) -> list[Path]:
    md = out / "request_sizes.md"
    md.write_text(f"```\n{command}\n```\n\n" + to_markdown(results, sizes, threads))
    raw = [{"model": r.name, "what": r.what, "shape": r.shape, "notes": r.notes, "max_abs_diff": r.max_diffs,
            "us_per_call": [{"engine": e, "threads": t, "rows": b, "us": s * 1e6} for (e, t, b), s in r.timings.items()]}
           for r in results]
    (out / "request_sizes.json").write_text(json.dumps(raw, indent=1))
    pngs = [out / f"request_sizes_{t}t.png" for t in threads]
    for t, png in zip(threads, pngs):
        plot(results, sizes, t, png)
    return [md, out / "request_sizes.json", *pngs]


# --------------------------------------------------------------------------- command line
def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) <= 0:
        raise SystemExit(f"error: {what} must be comma-separated positive integers, got {text!r}")
    return values


def main(argv=None) -> int:
    from request_size_models import MODELS
    from silvanforge_bench.bench import PEERS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="", help="comma-separated model names (default: all): "
                        + ", ".join(m.name for m in MODELS))
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="rows per call")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeat", type=int, default=3, help="timing runs per cell; the best counts")
    parser.add_argument("--peers", default=None, help="comma-separated peers (default: every installed one)")
    parser.add_argument("--all-peers", action="store_true", help="also run peers too slow to build on big models")
    parser.add_argument("--out", type=Path, default=Path("request-sizes"))
    parser.add_argument("--tune-budget", type=float, default=None,
                        help="seconds sf.tune may spend per model and thread count (default: its own)")
    parser.add_argument("--cpu", default=None,
                        help="compile and tune ours for this CPU (x86-64-v3, znver3, ...; default: this host's)")
    parser.add_argument("--quick", action="store_true", help="small models, short timings: a smoke test")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()] or [m.name for m in MODELS]
    unknown = [n for n in names if n not in {m.name for m in MODELS}]
    if unknown:
        raise SystemExit(f"error: unknown model {unknown[0]!r}; known: {', '.join(m.name for m in MODELS)}")
    sizes, threads = sorted(set(_ints(args.sizes, "--sizes"))), _ints(args.threads, "--threads")
    if args.repeat <= 0:
        raise SystemExit("error: --repeat must be a positive integer")
    peers = [p.strip() for p in args.peers.split(",") if p.strip()] if args.peers is not None else None
    known = [p[0] for p in PEERS]
    if peers is not None and any(p not in known for p in peers):
        raise SystemExit(f"error: unknown peer {next(p for p in peers if p not in known)!r}; known: {', '.join(known)}")
    if args.cpu is not None:  # checked before any model is trained: one error line
        from silvanforge.api import compile_options
        from silvanforge.errors import SilvanForgeError

        try:
            args.cpu = compile_options(None, cpu=args.cpu).cpu
        except SilvanForgeError as exc:
            raise SystemExit(f"error: {exc}") from None
    args.out.mkdir(parents=True, exist_ok=True)

    def say(what: str) -> None:
        print(what, file=sys.stderr, flush=True)

    command = "python benchmarks/request_sizes.py " + " ".join(argv if argv is not None else sys.argv[1:])
    written: list[Path] = []

    def write(results) -> None:
        written[:] = write_outputs(results, args.out, sizes, threads, command)

    results = measure(names, args.out, sizes, threads, 1 if args.quick else args.repeat, args.quick, peers,
                      args.all_peers, say, on_result=write,
                      tune_budget=args.tune_budget or (QUICK_TUNE_S if args.quick else None), cpu=args.cpu)
    print(to_markdown(results, sizes, threads))
    print("wrote " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
