"""Is the tuned plan as fast as every single form the compiler makes, at every request size?

    python benchmarks/forms_vs_tuned.py MODEL... [--threads 1,2] [--sizes 1,16,64,256,4096]
        [--budget 20] [--repeat 5] [--out F.json]

For each model and thread count this compiles every single form the CPU target makes of it
(each installed representation that takes the model, lowered for each batch class the plan
and the tuner use: 1, 16 and 64 rows and any), ``sf.compile``'s untuned plan and ``sf.tune``'s
plan (``--budget`` seconds), and times each at every request size on the same rotations of
fresh rows ``forge bench`` uses (best of ``--repeat`` rounds, every engine timed once a round).  It prints, per size, the fastest
single form and its time, the tuned and the untuned plan's, and the ratios tuned / fastest form
and untuned / tuned: the acceptance check of the plan by request size (the tuned plan within
5% of every form, the untuned plan within 1.3x of the tuned one).  docs/benchmarks.md
("Tuned plans against every form") shows its output.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

SIZES = (1, 16, 64, 256, 4096)
BATCH_CLASSES = (1, 16, 64, None)


def single_forms(forest) -> list[tuple[str, dict]]:
    """``(label, compile options)`` of every form: representation x batch class, for the
    representations whose estimate takes the model (a reason instead: they cannot run it); a
    walk lowered for one row unpadded, as the plan's one-row form is."""
    from silvanforge.plugins import registry
    from silvanforge.rep import cost_of

    reg = registry()
    forms = []
    for rep in reg.representations():
        if not isinstance(cost_of(reg.rep_class(rep), forest, "cpu", None), float):
            continue
        for batch in BATCH_CLASSES:
            kw = {"rep": rep, "batch_size": batch}
            if batch == 1 and reg.rep_kind(rep) == "walk":
                kw["pad"] = False
            forms.append((f"{rep}@{'any' if batch is None else batch}", kw))
    return forms


def measure(path: Path, sizes, threads: int, budget_s: float, repeat: int, say) -> dict:
    """Seconds a call of each engine (single forms, ``untuned``, ``tuned``) at each size."""
    import silvanforge as sf
    from silvanforge.frontend.loading import load_model
    from silvanforge.testing import random_rows
    from silvanforge_bench.bench_peers import time_call
    from silvanforge_bench.bench_peers._timing import pool_rows, rotation

    forest = load_model(str(path))
    row_bytes = forest.num_features * np.dtype(forest.threshold_dtype).itemsize
    pool = random_rows(forest, pool_rows(max(sizes), row_bytes), 0)
    engines = {}
    for label, kw in single_forms(forest):
        say(f"{path.stem}: compiling {label}")
        try:
            engines[label] = sf.compile(forest, threads=threads, **kw)
        except Exception as exc:  # noqa: BLE001 - a form that cannot be made is left out, said
            say(f"{path.stem}: {label} not made ({type(exc).__name__}: {str(exc)[:120]})")
    engines["untuned"] = sf.compile(forest, threads=threads)
    say(f"{path.stem}: tuning ({budget_s:g} s)")
    engines["tuned"] = sf.tune(forest, threads=threads, budget_s=budget_s)
    want = engines["untuned"].predict(pool[:max(sizes)])
    for label, cf in engines.items():
        got = cf.predict(pool[:max(sizes)])
        if not np.array_equal(got, want):  # every form is exact: a difference is a bug, said
            say(f"{path.stem}: {label} differs from the untuned plan by {np.max(np.abs(got - want)):.3g}")
    programs = {label: {rows: cf.form_for(rows).digest for rows in sizes} for label, cf in engines.items()}

    def time_one(cf, rows: int) -> float:
        return time_call(cf.predict, batches[rows], 1, 0.05)

    batches = {rows: rotation(pool, rows) for rows in sizes}
    seconds = timings(engines, programs, sizes, repeat, time_one,
                      lambda rows: say(f"{path.stem}: timing {rows} rows a call"))
    return {"model": path.stem, "threads": threads, "seconds": seconds, "programs": programs,
            "plans": {k: engines[k].plan_text() for k in ("untuned", "tuned")}}


def timings(engines: dict, programs: dict, sizes, repeat: int, time_one, say=lambda rows: None) -> dict:
    """Seconds a call of each engine at each size, best of ``repeat`` rounds (``time_one(engine,
    rows)`` times one).  Rounds in turn: each round times every program once, so a slow spell
    of the machine (2-thread timings of one program move by up to 1.18x) falls on all of them
    alike.  Engines answering a size with the very same program (``programs``: engine -> size ->
    digest of the form answering it) share one timing of it, taken as often as any other's:
    the same program timed twice read 260 and 332 us in one run on 2 threads, a difference of
    nothing but noise."""
    seconds: dict[str, dict[int, float]] = {label: {} for label in engines}
    for rows in sizes:
        say(rows)
        runs: dict[str, list[str]] = {}
        for label in engines:
            runs.setdefault(programs[label][rows], []).append(label)
        for _ in range(repeat):
            for labels in runs.values():
                took = time_one(engines[labels[0]], rows)
                for label in labels:
                    seconds[label][rows] = min(seconds[label].get(rows, took), took)
    return seconds


def table(results: list[dict], sizes) -> str:
    """Markdown: per model, threads and size, the fastest single form, the plans and the ratios."""
    lines = ["| model | threads | rows | fastest single form (us) | tuned (us) | untuned (us) "
             "| tuned / fastest form | untuned / tuned |", "|---|---:|---:|---|---:|---:|---:|---:|"]
    cells = near = close = 0
    for r in results:
        s, programs = r["seconds"], r.get("programs", {})
        for rows in sizes:
            forms = {k: v[rows] for k, v in s.items() if k not in ("tuned", "untuned")}
            best = min(forms, key=forms.get)
            tuned, untuned = s["tuned"][rows], s["untuned"][rows]

            def same(a: str, b: str) -> str:
                # "=": the two answer this size with one program (their time is shared)
                at = programs.get(a, {})
                return " (=)" if at and at.get(rows) == programs.get(b, {}).get(rows) else ""

            cells += 1
            near += tuned <= 1.05 * forms[best]
            close += untuned <= 1.3 * tuned
            lines.append(f"| {r['model']} | {r['threads']} | {rows} | {best} {forms[best] * 1e6:,.1f} "
                         f"| {tuned * 1e6:,.1f} | {untuned * 1e6:,.1f} | {tuned / forms[best]:.2f}{same('tuned', best)} "
                         f"| {untuned / tuned:.2f}{same('untuned', 'tuned')} |")
    lines += ["", f"(=): the same program.  Tuned within 5% of the fastest single form in {near} of {cells} "
              f"cells; untuned within 1.3x of tuned in {close} of {cells}."]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--budget", type=float, default=20.0, help="seconds of tuning a model and thread count")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="write the timings as JSON here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    started = time.perf_counter()

    def say(what: str) -> None:
        print(f"[{time.perf_counter() - started:6.0f} s] {what}", file=sys.stderr, flush=True)

    results = []
    for path in args.models:
        for threads in (int(t) for t in args.threads.split(",")):
            results.append(measure(path, sizes, threads, args.budget, args.repeat, say))
            if args.out is not None:
                args.out.write_text(json.dumps(results, indent=1))
    print(table(results, sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
