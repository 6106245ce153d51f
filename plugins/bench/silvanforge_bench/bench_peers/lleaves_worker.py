"""Runs lleaves for ``forge bench`` inside lleaves' own environment (llvmlite < 0.44).

    python lleaves_worker.py REQUEST.json

The request names the LightGBM model, the rows (.npy), the batch sizes, thread counts, repeat and
min_time, the compile cache file, and where to write predictions (.npy) and the result (.json).
This file imports only numpy, lleaves and ``_timing`` (next to it): SilvanForge is not installed
in that environment.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(request_path: str) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import numpy as np
    from _timing import rotation, time_call

    with open(request_path) as f:
        req = json.load(f)
    import lleaves
    import llvmlite

    try:
        from importlib.metadata import version

        lleaves_version = version("lleaves")
    except Exception:  # noqa: BLE001  # pragma: no cover - metadata missing
        lleaves_version = getattr(lleaves, "__version__", "?")
    X = np.ascontiguousarray(np.load(req["inputs"]), dtype=np.float64)
    model = lleaves.Model(model_file=req["model"])
    cache = req.get("cache")
    cached = bool(cache) and os.path.isfile(cache)
    start = time.perf_counter()
    model.compile(cache=cache) if cache else model.compile()
    compile_seconds = time.perf_counter() - start

    threads = [int(t) for t in req["threads"]]
    np.save(req["predictions"], np.asarray(model.predict(X[:int(req.get("check_rows", len(X)))],
                                                         n_jobs=threads[0])))
    timings = []
    for n in threads:
        for b in req["batch_sizes"]:
            rows = [np.ascontiguousarray(part) for part in rotation(X, b)]
            seconds = time_call(lambda A, n=n: model.predict(A, n_jobs=n), rows,
                                int(req["repeat"]), float(req["min_time"]))
            timings.append([n, int(b), seconds])
    result = {"timings": timings, "compile_seconds": compile_seconds, "cached": cached,
              "versions": {"lleaves": lleaves_version, "llvmlite": llvmlite.__version__,
                           "numpy": np.__version__,
                           "python": ".".join(map(str, sys.version_info[:3]))}}
    tmp = req["result"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, req["result"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
