"""A/B of vector walks against interleaved scalar walks: python benchmarks/vector_walk_ab.py MODEL..."""
import sys, time, numpy as np, silvanforge as sf
from silvanforge.lowering.walksetup import vector_walks
for path in sys.argv[1:]:
    forest = sf.load_model(path)
    for n in (512, 4096):
        X = np.random.default_rng(0).standard_normal((n, forest.num_features)).astype(np.float32)
        X[::11, 0] = np.nan
        cfs = {}
        for on in (False, True):
            with vector_walks(on):
                cfs[on] = sf.compile(forest, batch_size=n, threads=1)
        assert np.array_equal(cfs[False].predict(X), cfs[True].predict(X))
        best = {False: 1e9, True: 1e9}
        for _ in range(4):
            for on in (False, True):
                for _ in range(5):
                    t = time.thread_time(); cfs[on].predict(X); best[on] = min(best[on], time.thread_time() - t)
        print(f"{path.split('/')[-1]:20s} rows={n:5d} scalar {best[False]*1e3:7.3f} ms  vector {best[True]*1e3:7.3f} ms  vector/scalar speed {best[False]/best[True]:.2f}x", flush=True)
