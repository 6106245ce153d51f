"""Head-to-head A/B of compile variants on one thread, in one process, rounds interleaved.

    python benchmarks/ab.py MODEL [MODEL...] --variant default= --variant array=rep=array \
        [--batch-sizes 512,4096] [--rounds 5] [--peers onedal,catboost]

A variant is ``NAME=key=value,key=value`` of :func:`silvanforge.compile` keyword arguments
(``rep=array``, ``pad=0``, ``tile_size=4``, ``reorder=depth``), or ``packed=0`` / ``inline=0``
(the default-left bit in the flags byte, leaves apart: :func:`silvanforge.lowering.walksetup.node_widths`),
or ``treedepth=0`` (self-looping walks to the forest's depth, not each tree's), or
``split=0`` / ``split=1`` (rows read as given / split rows even where wide:
:func:`silvanforge.lowering.walksetup.split_rows`), or ``loops=0`` / ``loops=1`` (leaf checks kept / leaves self-looping wherever possible:
:func:`silvanforge.lowering.walksetup.leaf_self_loops`), or ``sets=0`` / ``sets=1`` (categorical
splits test bitsets / read set columns wherever split rows are read:
:func:`silvanforge.options.set_columns`).  Each call's time is the CPU time of the predicting
thread (``time.thread_time``), so other processes on a shared machine move it less than wall
time; the best over the rounds is quoted, with the speed relative to the first variant.  Rows are
``forge bench``'s, and calls go round its rotation of different batches.
Predictions of every variant are checked equal to the first's.  ``--peers``: ``forge bench``'s
peers of those names (on one thread) timed in the same rounds, every call then timed on the
wall clock (``time.perf_counter``), as a peer may work on threads of its own: ``forge bench``
times one engine after the other, so its ratios move with the machine's load.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time

import numpy as np

import silvanforge as sf
from silvanforge_bench.bench import random_rows
from silvanforge_bench.bench_peers._timing import pool_rows, rotation
from silvanforge.lowering.walksetup import leaf_self_loops, node_widths, per_tree_walk_depth, split_rows
from silvanforge.options import set_columns


def parse_variant(text: str) -> tuple[str, dict]:
    name, _, spec = text.partition("=")
    kw = {}
    for item in filter(None, spec.split(",")):
        key, _, value = item.partition("=")
        kw[key] = int(value) if value.lstrip("-").isdigit() else value
    return name, kw


def compile_variant(forest, batch_size: int, kw: dict):
    """``packed=0`` / ``inline=0`` force the wide node encodings (:func:`node_widths`); the rest
    goes to :func:`silvanforge.compile`."""
    kw = dict(kw)
    widths = {"packed_default_left": kw.pop("packed", None), "inline_leaves": kw.pop("inline", None)}
    widths = {k: bool(v) for k, v in widths.items() if v is not None}
    split = kw.pop("split", None)
    loops = kw.pop("loops", None)
    tree_depth = kw.pop("treedepth", None)
    sets = kw.pop("sets", None)
    with node_widths(**widths), \
            (contextlib.nullcontext() if sets is None else set_columns(bool(sets))), \
            (contextlib.nullcontext() if tree_depth is None else per_tree_walk_depth(bool(tree_depth))), \
            (contextlib.nullcontext() if loops is None else leaf_self_loops(bool(loops))), \
            (contextlib.nullcontext() if split is None else split_rows(bool(split))):
        return sf.compile(forest, batch_size=batch_size, threads=1, **kw)


def peer_engines(path: str, forest, names: list[str], workdir: str) -> dict:
    """``forge bench``'s peers named ``names`` that take this model, on one thread: name ->
    (predict, prepare); what they write (converted models, compiled libraries) goes under
    ``workdir``."""
    from silvanforge.plugins import registry
    from silvanforge_bench.bench import _detect_format
    from silvanforge_bench import bench_peers
    from silvanforge_bench.bench_peers import PEERS
    from silvanforge_bench.bench_peers.base import PeerContext, PeerUnavailable

    fmt = _detect_format(path, registry())
    # forge bench's own cache of built peer libraries, so a peer is built once, not every run
    ctx = PeerContext(path, fmt, forest.num_features, [1], workdir, bench_peers.cache_root())
    engines = {}
    for name, _, formats, factory in PEERS:
        if name in names and fmt in formats and name not in engines:
            try:  # (a peer refuses a model it cannot run, as in forge bench: left out)
                engine = factory(ctx)
                engine.set_threads(1)
                engines[name] = (engine.predict, engine.prepare)
            except PeerUnavailable as exc:
                print(exc)
    return engines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("models", nargs="+")
    p.add_argument("--variant", action="append", default=[])
    p.add_argument("--batch-sizes", default="512,4096")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--missing", type=float, default=0.0,
                   help="share of the rows' values made missing (NaN), as forge bench --missing")
    p.add_argument("--peers", default="", help="forge bench's peers to time alongside (comma-separated)")
    args = p.parse_args(argv)
    peers = [name for name in args.peers.split(",") if name]
    clock = time.perf_counter if peers else time.thread_time
    variants = [parse_variant(v) for v in (args.variant or ["default="])]
    workdir = tempfile.TemporaryDirectory(prefix="silvanforge-ab-")  # removed at exit
    for path in args.models:
        forest = sf.load_model(path)
        for n in (int(b) for b in args.batch_sizes.split(",")):
            # forge bench's rows, and its rotation: each call predicts the next of up to 16
            # different batches, so no variant learns one batch's branches.
            row_bytes = forest.num_features * np.dtype(forest.threshold_dtype).itemsize
            parts = rotation(random_rows(forest, pool_rows(n, row_bytes), seed=0, missing=args.missing), n)
            X = parts[0]
            cfs = {name: compile_variant(forest, n, kw) for name, kw in variants}
            first = variants[0][0]
            want = cfs[first].predict(X)
            for name, cf in cfs.items():
                got = cf.predict(X)
                if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
                    raise SystemExit(f"{name} differs from {first}: {np.abs(got - want).max()}")
            calls = {name: (cf.predict, parts) for name, cf in cfs.items()}
            for name, (predict, prepare) in peer_engines(path, forest, peers, workdir.name).items():
                calls[name] = (predict, [prepare(part) for part in parts])
            best = {name: float("inf") for name in calls}
            for r in range(args.rounds):
                for name, (predict, inputs) in calls.items():
                    for call in range(args.calls):
                        part = inputs[(r * args.calls + call) % len(inputs)]
                        t = clock()
                        predict(part)
                        best[name] = min(best[name], clock() - t)
            base = best[first]
            cells = "  ".join(f"{name} {best[name] * 1e3:8.3f} ms ({base / best[name]:.2f}x)" for name in calls)
            print(f"{path.split('/')[-1]:22s} rows={n:5d}  {cells}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
