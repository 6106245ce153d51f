"""What a row costs as users hold it: a NumPy array against pandas, polars and pyarrow frames
and records, one process, one thread, the median of many calls.

    python benchmarks/frames.py [--sizes 1,64,4096] [--calls 2000] [--quick] [--fresh] [--cpu x86-64-v3]

Four models trained here on generated data: XGBoost with 28 numeric features (100 trees,
depth 8), XGBoost with 4 of its 28 features categorical (``enable_categorical``), LightGBM
with the same 4 categorical features (100 trees, 63 leaves), and LightGBM of 1000 leaf-wise
trees of 31 leaves on 4 integer categorical features.  Each input holds the same rows:
the array is what the compiled code reads (the model's input dtype; category codes in the
model's order), the frames hold numbers and categories as a user's frame does (the categories
in another order than the model's, so they are mapped; polars twice: NaN where numbers are
missing and Enum categories, and as its readers and ``from_pandas`` make a frame, nulls and
Categorical), and records as a service makes them a pandas frame or a pyarrow table: labels as
strings (integer ones numbers), a missing number None.  Every result is checked equal to the
array's before it is timed, and the inputs are timed in turns (ten rounds, each timing every
input), so that a slower minute of the machine falls on all of them alike.  It prints a markdown table: microseconds per call and the ratio
to the array call at each request size.  ``--quick``: small models and few calls (a smoke test);
``--fresh``: each call its own copy of the input, made anew (a pickle's round trip) before the
clock starts, as a service's requests are (the array too).
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import time

import numpy as np

FEATURES = 28
CATEGORICAL = 4  # the first features of the categorical models
LABELS = [f"c{i}" for i in range(12)]
ROUNDS = 10  # rounds in which the inputs take turns (:func:`_median_us`)


def _frame(rng, n: int, categorical):
    """``categorical``: False, True (string categories) or "integers" (integer categories, as
    pandas holds codes of real data often; polars holds them as plain integers)."""
    import pandas as pd

    X = rng.normal(size=(n, FEATURES)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(FEATURES)])
    if categorical:
        for i in range(CATEGORICAL):
            labels = list(range(5 + 4 * i)) if categorical == "integers" else LABELS[: 4 + 2 * i]
            frame[f"f{i}"] = pd.Categorical(rng.choice(labels, n), categories=labels)
    return frame


def _target(frame, rng):
    codes = [frame[c].cat.codes.to_numpy() if frame[c].dtype == "category" else np.nan_to_num(frame[c].to_numpy())
             for c in frame.columns[:6]]
    return codes[0] % 3 + np.sin(codes[1]) + codes[2] * codes[3] % 2 + codes[4] - codes[5] ** 2 + rng.normal(size=len(frame))


def _models(quick: bool, wanted: list | None = None):
    """(name, fitted model, categorical) of each model (of those ``wanted`` names a word of)."""
    for name, fit, categorical in _model_fits(quick):
        if not wanted or any(w in name for w in wanted):
            yield name, fit(), categorical


def _model_fits(quick: bool):
    """(name, a function fitting the model, categorical): the data and targets drawn in one order
    whichever models are fitted, so a model is the same measured alone or with the others."""
    import lightgbm as lgb
    import xgboost as xgb

    rng = np.random.default_rng(0)
    n, trees = (2000, 20) if quick else (20000, 100)
    numeric, categorical = _frame(rng, n, False), _frame(rng, n, True)
    y_numeric, y_xgb, y_lgb = _target(numeric, rng), _target(categorical, rng), _target(categorical, rng)
    yield "xgboost numeric", lambda: xgb.XGBRegressor(n_estimators=trees, max_depth=8, tree_method="hist").fit(
        numeric, y_numeric), False
    yield "xgboost categorical", lambda: xgb.XGBRegressor(
        n_estimators=trees, max_depth=8, tree_method="hist", enable_categorical=True,
        max_cat_to_onehot=1).fit(categorical, y_xgb), True
    yield "lightgbm categorical", lambda: lgb.LGBMRegressor(n_estimators=trees, num_leaves=63, verbose=-1).fit(
        categorical, y_lgb), True
    # 1000 leaf-wise trees on integer categories (the one-row form chains its walks)
    integers = _frame(rng, n, "integers")
    y_integers = _target(integers, rng)
    yield "lightgbm 1000 trees, integer categories", lambda: lgb.LGBMRegressor(
        n_estimators=trees * 10, num_leaves=31, verbose=-1).fit(integers, y_integers), "integers"


def _inputs(frame, categorical: bool, cf):
    """name -> the rows of ``frame`` as that input, the array first."""
    import pandas as pd

    out = {}
    codes = frame.copy()
    for name, labels in (cf.forest.feature_categories or {}).items():
        column = frame.columns[name]
        codes[column] = frame[column].cat.set_categories(labels).cat.codes.replace(-1, np.nan).astype(float)
    out["numpy array"] = np.ascontiguousarray(codes.to_numpy(dtype=np.float64), dtype=cf.main.input_dtype)
    shuffled = frame.copy()
    if categorical:  # categories in another order than the model's: mapped, not read as codes
        for i in range(CATEGORICAL):
            c = shuffled[f"f{i}"]
            shuffled[f"f{i}"] = pd.Categorical(c.astype(object), categories=list(c.cat.categories)[::-1])
    out["pandas"] = shuffled
    try:  # numbers Arrow-backed (as pandas reads parquet with dtype_backend="pyarrow"), categories as they are
        import pyarrow as pa

        out["pandas, Arrow-backed numbers"] = shuffled.astype(
            {c: pd.ArrowDtype(pa.from_numpy_dtype(shuffled[c].dtype)) for c in shuffled.columns
             if shuffled[c].dtype != "category"})
    except ImportError:
        pass
    try:
        import polars as pl

        # categorical columns as an Enum of the frame's categories
        # categorical columns as an Enum of the frame's categories; integer ones as polars holds
        # them (plain integers, what polars.from_pandas makes of them)
        out["polars"] = pl.DataFrame([
            pl.Series(c, shuffled[c].astype(object).where(shuffled[c].notna(), None).tolist(),
                      dtype=pl.Int64 if categorical == "integers" else
                      pl.Enum([str(v) for v in shuffled[c].cat.categories]))
            if shuffled[c].dtype == "category" else pl.Series(c, shuffled[c].to_numpy()) for c in shuffled.columns])
        # ... and as polars' readers and from_pandas make a frame: missing numbers null, categories
        # Categorical (each frame's labels its own, in the order they appear)
        out["polars, nulls and Categorical"] = pl.from_pandas(shuffled)
    except Exception:  # noqa: BLE001 - polars absent, or an older one without this conversion
        pass
    try:
        import pyarrow as pa

        out["pyarrow"] = pa.Table.from_pandas(shuffled, preserve_index=False)
    except ImportError:
        pass
    records = shuffled.astype(object).where(shuffled.notna(), None).to_dict("records")
    out["records (list of dicts)"] = records
    # Records as a service makes a frame or table of them: categories as their labels (strings;
    # integer ones numbers), a number missing None
    out["pandas of records (labels as strings)"] = pd.DataFrame(records)
    try:
        import pyarrow as pa

        out["pyarrow of records (labels as strings)"] = pa.Table.from_pylist(records)
    except ImportError:
        pass
    return out


def _median_us(calls: dict, count: int, rounds: int = ROUNDS) -> dict:
    """The median time of each of ``calls`` (name -> ``(call, fresh)``: ``call(X)`` with each
    call's own ``X`` made by ``fresh()`` before the clock starts, or ``call()`` where ``fresh`` is
    None), ``count`` calls each, timed in ``rounds`` rounds that take turns: each round times
    every input in turn, so a slower minute of the machine falls on all of them and not on the
    ratio of one to the array (this VM's one-row array call ran 2.3-3.7 us from one run to the next).
    Each input's turn starts with a call untimed, so that its calls are timed warm, as a run of
    them finds them (the caches the input before it left: 4,096-row turns of two calls read
    polars' categorical frames 1.6x slower than the turns of twenty before)."""
    times: dict = {name: [] for name in calls}
    per_round = max(1, count // rounds)
    for _ in range(rounds):
        for name, (call, fresh) in calls.items():
            kept = times[name]
            call() if fresh is None else call(fresh())
            for _ in range(per_round):
                if fresh is None:
                    start = time.perf_counter()
                    call()
                else:
                    X = fresh()
                    start = time.perf_counter()
                    call(X)
                kept.append(time.perf_counter() - start)
    return {name: statistics.median(kept) * 1e6 for name, kept in times.items()}


def _copy(X):
    """``X`` made anew, as a request's frame is: its library's objects rebuilt (a pickle's round
    trip), so nothing it holds is the object an earlier call saw."""
    return pickle.loads(pickle.dumps(X))


def main(argv=None) -> None:
    import silvanforge as sf
    from silvanforge.inputs.arrow_frames import columns_kernel
    from silvanforge.inputs.arrow_native import reader
    from silvanforge.inputs.records import native_reader as records_reader

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,64,4096")
    parser.add_argument("--calls", type=int, default=2000, help="calls timed at 1 row (fewer at larger sizes)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--fresh", action="store_true", help="each call its own frame, made anew before it is "
                        "timed (as a service's requests are), not the same object again")
    parser.add_argument("--cpu", default=None, help="the CPU to build code for (e.g. x86-64-v3: AVX2 only), "
                        "default this host's")
    parser.add_argument("--models", default="", help="only the models whose names hold one of these "
                        "comma-separated words (e.g. 'integer')")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    calls = 50 if args.quick else args.calls
    rng = np.random.default_rng(1)
    head = "| model | input | " + " | ".join(f"{n} row{'s' * (n > 1)}: us (x array)" for n in sizes) + " |"
    print(head)
    print("|---|---|" + "---:|" * len(sizes))
    wanted = [w for w in args.models.split(",") if w]
    for name, model, categorical in _models(args.quick, wanted):
        # (every form built: no compile beside the calls timed)
        cf = sf.compile(model, threads=1, cpu=args.cpu).wait()
        columns_kernel(wait=True)  # (nor the kernel of arrow columns, which a first large table starts,
        reader(wait=True)  # nor the C++ reader of arrow tables, which the first table starts,
        records_reader(wait=True)  # nor that of records (else the first model's records are timed while it loads))
        test = _frame(rng, max(sizes), categorical)
        results: dict[str, list[str]] = {}
        for n in sizes:
            inputs = _inputs(test.iloc[:n].reset_index(drop=True), categorical, cf)
            expected = cf.predict(inputs["numpy array"], threads=1)
            timed_calls = {}
            for what, X in inputs.items():
                try:
                    got = cf.predict(X, threads=1)
                except Exception as exc:  # noqa: BLE001 - an input this version does not read
                    results.setdefault(what, []).append(f"- ({type(exc).__name__})")
                    continue
                np.testing.assert_array_equal(got, expected, err_msg=f"{name}, {what}, {n} rows")
                if args.fresh:
                    timed_calls[what] = (lambda X_, cf=cf: cf.predict(X_, threads=1), lambda X=X: _copy(X))
                else:
                    timed_calls[what] = (lambda X=X, cf=cf: cf.predict(X, threads=1), None)
            medians = _median_us(timed_calls, max(20, calls * 4 // (4 + n)))
            base = medians["numpy array"]
            for what, us in medians.items():
                results.setdefault(what, []).append(f"{us:,.1f} ({us / base:.2f}x)")
        for what, cells in results.items():
            print(f"| {name} | {what} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
