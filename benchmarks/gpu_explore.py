"""Measure GPU template schedules and ways of moving rows to the device, on an NVIDIA GPU.

    python benchmarks/gpu_explore.py MODEL [MODEL ...] [--batches 512,4096,65536] [--out DIR]

For every model: every template schedule of a grid (rows per block, tree threads, rows per
thread = interleave, shared or global reduction, rep) is compiled (nvcc in parallel), checked
against the reference evaluator, and its kernel time (CUDA events, median of many calls) measured
at each batch size.  Then rows of the largest batch are moved to the device in several ways
(staging copy into pinned memory then one DMA, pageable copy, staging in chunks by several
threads overlapped with the DMA).  Prints the best schedules per batch and writes every number to
OUT/gpu_explore.json.  Used to set :mod:`silvanforge_gpu.template`'s default and
:mod:`silvanforge_target_cuda.launch`'s copy (docs/benchmarks.md, "NVIDIA GPUs").
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import itertools
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
from silvanforge_bench.bench import random_rows
from silvanforge_gpu.template import TemplateParams, gpu_template

import silvanforge as sf
from silvanforge.runtime import reference


def grid(forest):
    for rpb, tt, rpt, shared, rep in itertools.product((8, 16, 32, 64, 128), (1, 4, 10, 20, 50), (1, 2, 4),
                                                        (True, False), ("sparse", "array")):
        if rpt > rpb or (tt == 1 and not shared) or (rpb // rpt) * tt > 1024 or tt > forest.num_trees:
            continue
        if rep == "array" and (tt, rpt) not in ((10, 1), (20, 1), (4, 2), (1, 1)):
            continue  # array checked on a few shapes only
        yield rep, TemplateParams(rows_per_block=rpb, tree_threads=tt, rows_per_thread=rpt, interleave=rpt,
                                  shared_reduce=shared and tt > 1)


def _ptx(args):
    path, rep, params, arch = args
    import silvanforge_target_cuda as ct
    forest = sf.load_model(path)
    low = sf.lower(forest, target="cuda", rep=rep, schedule=gpu_template(forest, params))
    return ct.compile_ptx(ct.source(low.lir), arch)


def time_kernel(kernel, X, k, calls=30):
    kernel.margins(X, k)
    ks, ts = [], []
    for _ in range(calls):
        kernel.margins(X, k)
        ks.append(kernel.last_timing["kernel"])
        ts.append(kernel.last_timing["total"])
    return statistics.median(ks), statistics.median(ts)


def explore_schedules(path, batches, results):
    from silvanforge_target_cuda.launch import CudaKernel, device_arch

    forest = sf.load_model(path)
    k = forest.num_outputs
    configs = list(grid(forest))
    arch = device_arch()
    t0 = time.perf_counter()
    with cf.ProcessPoolExecutor(os.cpu_count()) as pool:
        ptxs = list(pool.map(_ptx, [(path, rep, p, arch) for rep, p in configs]))
    print(f"{path}: {len(configs)} schedules compiled in {time.perf_counter() - t0:.1f} s", flush=True)
    inputs = {n: random_rows(forest, n, seed=n) for n in batches}
    refs = {n: reference.predict(forest, X, output_margin=True).reshape(n, -1) for n, X in inputs.items()}
    rows = []
    for (rep, p), ptx in zip(configs, ptxs):
        low = sf.lower(forest, target="cuda", rep=rep, schedule=gpu_template(forest, p))
        kernel = CudaKernel(low.lir, ptx)
        row = {"rep": rep, **dataclasses.asdict(p)}
        for n, X in inputs.items():
            got = kernel.margins(np.ascontiguousarray(X, dtype=kernel.input_dtype), k)
            err = float(np.max(np.abs(got.reshape(n, -1) - refs[n])))
            kt, tt = time_kernel(kernel, np.ascontiguousarray(X, dtype=kernel.input_dtype), k)
            row[f"kernel_{n}"], row[f"total_{n}"], row[f"err_{n}"] = kt, tt, err
        rows.append(row)
    results[str(path)] = rows
    for n in batches:
        ok = [r for r in rows if r[f"err_{n}"] < 1e-3]
        bad = len(rows) - len(ok)
        ok.sort(key=lambda r: r[f"kernel_{n}"])
        print(f"  batch {n}: {bad} wrong; best kernels:")
        for r in ok[:6]:
            print(f"    {r[f'kernel_{n}'] * 1e6:8.1f} us kernel {r[f'total_{n}'] * 1e6:8.1f} us total  "
                  f"{r['rep']} rpb={r['rows_per_block']} tt={r['tree_threads']} rpt={r['rows_per_thread']} "
                  f"shared={r['shared_reduce']}")
        default = [r for r in rows if r["rep"] == "sparse" and r["rows_per_block"] == 32 and r["tree_threads"] == 20
                   and r["rows_per_thread"] == 1 and not r["shared_reduce"]]
        if default:
            print(f"    default-like (sparse 32/20/1 global): {default[0][f'kernel_{n}'] * 1e6:.1f} us")


def explore_copies(nbytes_list, results):
    """Host -> device copies of a pageable numpy array, several ways."""
    import pycuda.driver as cuda
    from silvanforge_target_cuda.launch import _primary

    dev, ctx = _primary()
    ctx.push()
    out = {}
    try:
        stream = cuda.Stream()
        for nbytes in nbytes_list:
            src = np.random.default_rng(0).random(nbytes // 8)
            d = cuda.mem_alloc(nbytes)
            pinned = cuda.pagelocked_empty(nbytes, np.uint8)
            pool = cf.ThreadPoolExecutor(8)

            def staged():
                pinned[:] = src.view(np.uint8)
                cuda.memcpy_htod_async(d, pinned, stream)
                stream.synchronize()

            def pageable():
                cuda.memcpy_htod(d, src)

            def chunked(threads, chunk=1 << 20):
                raw = src.view(np.uint8)
                spans = [(i, min(i + chunk, nbytes)) for i in range(0, nbytes, chunk)]

                def copy(span):
                    a, b = span
                    pinned[a:b] = raw[a:b]
                    return span
                for a, b in pool.map(copy, spans) if threads > 1 else map(copy, spans):
                    cuda.memcpy_htod_async(int(d) + a, pinned[a:b], stream)
                stream.synchronize()

            def pinned_only():
                cuda.memcpy_htod_async(d, pinned, stream)
                stream.synchronize()

            def registered():
                from silvanforge_target_cuda.launch import host_register, host_unregister
                assert host_register(src)
                cuda.memcpy_htod_async(d, src, stream)
                stream.synchronize()
                host_unregister(src.ctypes.data)

            ways = {"registered": registered, "staged": staged, "pageable": pageable, "chunked1": lambda: chunked(1),
                    "chunked8": lambda: chunked(8), "dma-only": pinned_only,
                    "numpy-copy-only": lambda: pinned.__setitem__(slice(None), src.view(np.uint8))}
            for name, fn in ways.items():
                fn()
                ts = []
                for _ in range(20):
                    t = time.perf_counter()
                    fn()
                    ts.append(time.perf_counter() - t)
                med = statistics.median(ts)
                out[f"{name}_{nbytes}"] = med
                print(f"  copy {nbytes / 1e6:6.1f} MB {name:16s} {med * 1e6:8.1f} us  {nbytes / med / 1e9:6.1f} GB/s")
            pool.shutdown()
    finally:
        cuda.Context.pop()
    results["copies"] = out
    largest = max(nbytes_list)
    best = min(("registered", "staged", "pageable"), key=lambda w: out[f"{w}_{largest}"])
    Path(os.environ.get("OUT", "."), "best_copy").write_text(best)
    print(f"  fastest way for {largest / 1e6:.1f} MB: {best}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--batches", default="512,4096,65536")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--skip-schedules", action="store_true")
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    results = {}
    explore_copies([65536 * 32 * 4, 65536 * 32 * 8], results)
    if not a.skip_schedules:
        for m in a.models:
            explore_schedules(m, batches, results)
            Path(a.out, "gpu_explore.json").write_text(json.dumps(results, indent=1))
    Path(a.out, "gpu_explore.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
