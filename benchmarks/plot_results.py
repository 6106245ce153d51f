"""Draw docs/img/*.png from the tables of docs/benchmarks.md, so the pictures never disagree with
the numbers: each table marked ``<!-- table: NAME -->`` on the line before it becomes NAME.png.

    pip install matplotlib
    python benchmarks/plot_results.py [--doc docs/benchmarks.md] [--out docs/img]

The tables stay the record; this script only reads them.  A table it has no drawing for is
skipped with a message.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"-?[0-9][0-9,]*\.?[0-9]*")
SETTINGS = ["1 thread, 512", "1 thread, 4096", "2 threads, 512", "2 threads, 4096"]


def read_tables(doc: Path) -> dict[str, list[dict[str, str]]]:
    """Every marked table as a list of rows, each a dict from column header to cell text."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    tables = {}
    for i, line in enumerate(lines):
        marker = re.match(r"<!-- table: ([\w-]+) -->", line.strip())
        if not marker:
            continue
        header = [c.strip() for c in lines[i + 1].strip().strip("|").split("|")]
        rows = []
        for row in lines[i + 3:]:
            if not row.startswith("|"):
                break
            rows.append(dict(zip(header, (c.strip() for c in row.strip().strip("|").split("|")))))
        tables[marker.group(1)] = rows
    return tables


def number(cell: str) -> float | None:
    """The first number in a cell ("9.68x XGBoost" -> 9.68, "4,017,160" -> 4017160, "-" -> None)."""
    match = NUMBER.search(cell)
    return float(match.group().replace(",", "")) if match else None


def ratio_bars(plt, rows, title, out: Path):
    """Ours / the fastest peer for each model at each thread count and batch size."""
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.5))
    height = 0.8 / len(SETTINGS)
    for k, setting in enumerate(SETTINGS):
        values = [number(r[setting]) or 0 for r in rows]
        ax.barh([i + k * height for i in range(len(rows))], values, height, label=setting)
    ax.set_yticks([i + 1.5 * height for i in range(len(rows))], [r["model"] for r in rows])
    ax.invert_yaxis()
    ax.axvline(2, color="black", linewidth=0.8, linestyle="--")
    ax.set_xlabel("ours / fastest peer (dashed: 2x)")
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def small_calls(plt, rows, out: Path):
    engines = ["ours 1 row", "ONNX Runtime", "lleaves", "TL2cgen"]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(engines)
    for k, engine in enumerate(engines):
        xs = [i + k * width for i in range(len(rows))]
        values = [number(r[engine]) for r in rows]
        ax.bar([x for x, v in zip(xs, values) if v], [v for v in values if v], width,
               label=engine.replace(" 1 row", ""))
    ax.set_xticks([i + 1.5 * width for i in range(len(rows))], [r["model"] for r in rows],
                  rotation=15)
    ax.set_yscale("log")
    ax.set_ylabel("us per 1-row call (log)")
    ax.set_title("1-row calls, one thread, fresh rows (Zen 4)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def gpu(plt, rows, out: Path):
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(9, 3.6), sharey=True)
    for ax, model in zip(axes, models):
        mine = [r for r in rows if r["model"] == model]
        batches = [number(r["batch"]) for r in mine]
        for column in ("ours rows/s", "ours kernel rows/s", "Hummingbird rows/s"):
            ax.plot(batches, [number(r[column]) for r in mine], marker="o", label=column.replace(" rows/s", ""))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("rows a call")
        ax.set_title(f"{model}, H100")
    axes[0].set_ylabel("rows/s (log)")
    axes[0].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args.out.mkdir(parents=True, exist_ok=True)
    drawings = {
        "large-batches": lambda rows, out: ratio_bars(
            plt, rows, "Large batches: synthetic suite and real data (Zen 4)", out),
        "public-shapes": lambda rows, out: ratio_bars(plt, rows, "Public suites' shapes (Zen 4)", out),
        "categorical": lambda rows, out: ratio_bars(
            plt, rows, "Categorical features, deep leaf-wise trees (Zen 4)", out),
        "small-calls": lambda rows, out: small_calls(plt, rows, out),
        "gpu": lambda rows, out: gpu(plt, rows, out),
    }
    for name, rows in read_tables(args.doc).items():
        if name not in drawings:
            print(f"{name}: no drawing for this table, skipped")
            continue
        out = args.out / f"{name}.png"
        drawings[name](rows, out)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
