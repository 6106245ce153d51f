"""Batch scoring where the data lives: Spark (local[2]) and Ray Data (2 CPUs), rows per second.

    python benchmarks/spark_scoring.py [--rows 2000000] [--rounds 3] [--out /tmp/sfbench-engines]

For each model, on the same cached rows, three scorers of the same kind (Spark: an iterator
Arrow UDF over the feature columns, as silvanforge.spark's, written to Spark's no-op sink;
Ray: a callable class in map_batches over pyarrow batches of 10,000 rows, an actor a CPU,
materialized):
- ours: silvanforge.spark.transform / silvanforge.ray.Predictor (one thread a task or actor);
- the library's own predict in that UDF or class, its model loaded once a worker (Spark: the
  booster broadcast, as users write it), one thread;
- the floor: a UDF or class that returns its input (a feature column as the prediction), what
  the engine costs with no model at all.
``--forms`` adds, on the first model, ours as a pandas UDF (PySpark before 4.1) and as
``mapInArrow`` (every column both ways), each beside its own floor.

The models: benchmarks/make_models.py's xgb_100x8 (100 trees of depth 8 over 32 float
features, read by position) and a LightGBM model of 1000 trees of 31 leaves over the
insurance-like data of benchmarks/categorical_models.py (10 numeric features with missing
values and 5 categorical ones of 5-25 levels, their labels strings in the engines' tables),
trained here.  Every variant runs once to warm up (Python workers, models loaded), then each
round runs every variant in turn; the best round is kept (the machine is shared: read the
ratios).  A sample of each model's predictions is checked against the library's first.
"""

# (no `from __future__ import annotations`: PySpark reads a UDF's kind from its type hints)
import argparse
import sys
import time
from pathlib import Path
from typing import Iterator, Tuple

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))  # support_engines: the tests' local Spark and Ray

BATCH = 10_000  # rows a batch: Spark's default spark.sql.execution.arrow.maxRecordsPerBatch


# ------------------------------------------------------------------ models and data
def models(out: Path) -> dict:
    """name -> (model file, library, feature names, categorical features and their labels)."""
    import lightgbm as lgb

    out.mkdir(parents=True, exist_ok=True)
    xgb_path = out / "xgb_100x8.json"
    if not xgb_path.exists():
        import make_models

        make_models.main(out)
    lgb_path = out / "lgb_insurance_1000x31_strings.txt"
    if not lgb_path.exists():
        import categorical_models

        X, y, cats = categorical_models.dataset("insurance", 50_000)
        for c in cats:
            X[c] = X[c].cat.rename_categories(lambda v: f"L{v}")
        params = {"objective": "gamma", "num_leaves": 31, "max_depth": -1, "learning_rate": 0.1,
                  "min_data_in_leaf": 5, "max_cat_to_onehot": 4, "max_cat_threshold": 64, "cat_smooth": 5,
                  "min_data_per_group": 20, "verbose": -1, "num_threads": 2, "seed": 1}
        lgb.train(params, lgb.Dataset(X, y, categorical_feature=cats), 1000).save_model(str(lgb_path))
    booster = lgb.Booster(model_file=str(lgb_path))
    names = booster.feature_name()
    labels = dict(zip([n for n in names if n.startswith("cat")], booster.pandas_categorical))
    return {"xgb_100x8": (xgb_path, "xgboost", [f"f{i}" for i in range(32)], {}),
            "lgb_cat_1000x31": (lgb_path, "lightgbm", names, labels)}


def spark_rows(spark, rows: int, features: list, labels: dict):
    """A cached DataFrame of ``rows`` rows: an id, and the features (strings for categories)."""
    from pyspark.sql import functions as F

    columns = []
    for i, name in enumerate(features):
        if name in labels:
            k = len(labels[name])
            columns.append(F.concat(F.lit("L"), F.floor(F.rand(seed=i) * k).cast("int").cast("string")).alias(name))
        elif labels:  # the insurance-like numbers: a tenth missing
            columns.append(F.when(F.rand(seed=100 + i) < 0.1, F.lit(None)).otherwise(F.randn(seed=i)).alias(name))
        else:
            columns.append(F.randn(seed=i).cast("float").alias(name))
    df = spark.range(rows, numPartitions=8).select("id", *columns).cache()
    df.count()
    return df


def arrow_rows(rows: int, features: list, labels: dict, blocks: int = 8):
    """The same kind of rows as pyarrow tables, for Ray."""
    import pyarrow as pa

    rng = np.random.default_rng(0)
    data = {"id": np.arange(rows)}
    for name in features:
        if name in labels:
            data[name] = pa.array(np.array(labels[name], dtype=object)[rng.integers(0, len(labels[name]), rows)])
        elif labels:
            values = rng.normal(size=rows)
            values[rng.random(rows) < 0.1] = np.nan
            data[name] = pa.array(values, from_pandas=True)
        else:
            data[name] = rng.normal(size=rows).astype(np.float32)
    table = pa.table(data)
    step = -(-rows // blocks)
    return [table.slice(i, step) for i in range(0, rows, step)]


# ------------------------------------------------------------------ the library's own scoring
def library_model(path, library: str):
    """The training library's booster, as a user loads it, predicting on one thread."""
    if library == "xgboost":
        import xgboost as xgb

        booster = xgb.Booster(params={"nthread": 1})
        booster.load_model(str(path))
        return booster
    import lightgbm as lgb

    return lgb.Booster(model_file=str(path))


def library_predict(model, library: str, features: list, labels: dict, arrays) -> np.ndarray:
    """The library's predict of Arrow columns, as a user writes it: XGBoost's inplace_predict of
    the columns stacked; LightGBM's of a pandas frame whose categories are the model's."""
    if library == "xgboost":
        return model.inplace_predict(np.column_stack([a.to_numpy(zero_copy_only=False) for a in arrays]))
    import pandas as pd

    frame = pd.DataFrame({name: pd.Categorical(a.to_numpy(zero_copy_only=False), categories=labels[name])
                          if name in labels else a.to_numpy(zero_copy_only=False)
                          for name, a in zip(features, arrays)})
    return model.predict(frame, num_threads=1)


# ------------------------------------------------------------------ Spark
def spark_variants(spark, df, path, library: str, features: list, labels: dict, forms: bool) -> dict:
    import pyarrow as pa
    from pyspark.sql import functions as F

    import silvanforge as sf
    import silvanforge.spark as sfs

    cf = sf.compile(str(path))
    # the booster broadcast, as users write it: unpickled once a Python worker (its class is the
    # library's, which the workers import)
    bc = spark.sparkContext.broadcast(library_model(path, library))

    def library_udf(batches: Iterator[Tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
        model = bc.value
        for arrays in batches:
            values = library_predict(model, library, features, labels, arrays)
            yield pa.array(np.asarray(values, dtype=np.float64))

    def floor_udf(batches: Iterator[Tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
        for arrays in batches:
            yield arrays[-1].cast(pa.float64())  # a numeric feature: the input itself

    cols = [F.col(c) for c in features]
    out = {"ours": sfs.transform(df, cf, features=features),
           "library": df.withColumn("prediction", F.arrow_udf(library_udf, "double")(*cols)),
           "floor": df.withColumn("prediction", F.arrow_udf(floor_udf, "double")(*cols))}
    if forms:
        out.update(spark_forms(spark, df, cf, features))
    return out


def spark_forms(spark, df, cf, features: list) -> dict:
    """Ours as a pandas UDF (the form on PySpark before 4.1) and in mapInArrow, and their floors."""
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    import silvanforge.spark as sfs
    from silvanforge.artifact.shipped import ShippedModel

    arrow_udf = F.arrow_udf
    del F.arrow_udf  # silvanforge.spark then makes a pandas UDF, as on PySpark 4.0
    try:
        pandas_ours = sfs.transform(df, cf, features=features)
    finally:
        F.arrow_udf = arrow_udf

    def pandas_floor(batches: Iterator[Tuple[pd.Series, ...]]) -> Iterator[pd.Series]:
        for series in batches:
            yield series[-1].astype(np.float64)

    bc = spark.sparkContext.broadcast(ShippedModel.of(cf))
    names = list(features)

    def map_ours(batches):
        model = bc.value.load()
        for batch in batches:
            values = model.predict(pa.Table.from_batches([batch]).select(names), threads=1)
            yield batch.append_column("prediction", pa.array(values.astype(np.float64)))

    def map_floor(batches):
        for batch in batches:
            yield batch.append_column("prediction", batch.column(names[-1]).cast(pa.float64()))

    schema = T.StructType(df.schema.fields + [T.StructField("prediction", T.DoubleType())])
    cols = [F.col(c) for c in features]
    return {"ours, pandas UDF": pandas_ours,
            "floor, pandas UDF": df.withColumn("prediction", F.pandas_udf(pandas_floor, "double")(*cols)),
            "ours, mapInArrow": df.mapInArrow(map_ours, schema),
            "floor, mapInArrow": df.mapInArrow(map_floor, schema)}


def run_spark(frame) -> float:
    start = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def spark_check(df, variants: dict) -> float:
    """The largest difference between ours and the library's on a sample of rows."""
    sample = df.limit(2000)
    ours = variants["ours"].select("id", "prediction").join(sample.select("id"), "id").toPandas().sort_values("id")
    lib = variants["library"].select("id", "prediction").join(sample.select("id"), "id").toPandas().sort_values("id")
    return float(np.max(np.abs(ours.prediction.to_numpy() - lib.prediction.to_numpy())))


# ------------------------------------------------------------------ Ray
def ray_variants(path, library: str, features: list, labels: dict) -> dict:
    import pyarrow as pa

    import silvanforge as sf
    from silvanforge.ray import Predictor

    class LibraryPredictor:
        def __init__(self, path):
            self.model = library_model(path, library)  # once an actor

        def __call__(self, batch):
            values = library_predict(self.model, library, features, labels, [batch.column(c) for c in features])
            return batch.append_column("prediction", pa.array(np.asarray(values, dtype=np.float64)))

    class Floor:
        def __init__(self, last: str):
            self.last = last

        def __call__(self, batch):
            return batch.append_column("prediction", batch.column(self.last).cast(pa.float64()))

    cf = sf.compile(str(path))
    return {"ours": (Predictor, (cf,), {"features": features}),
            "library": (LibraryPredictor, (str(path),), {}),
            "floor": (Floor, (features[-1],), {})}


def run_ray(ds, cls, args, kwargs) -> float:
    import ray.data

    start = time.perf_counter()
    ds.map_batches(cls, fn_constructor_args=args, fn_constructor_kwargs=kwargs, batch_format="pyarrow",
                   batch_size=BATCH, compute=ray.data.ActorPoolStrategy(size=2), num_cpus=1).materialize()
    return time.perf_counter() - start


# ------------------------------------------------------------------ the rounds and the table
def best_of(variants: dict, run, rounds: int, skip_slow_after: float) -> dict:
    """Each variant's best time: a warm-up run each, then ``rounds`` rounds of every variant in
    turn (a variant slower than ``skip_slow_after`` seconds runs one round: the library's
    1000-tree model, whose rate its own predict decides)."""
    times = {name: [] for name in variants}
    for name, v in variants.items():
        times[name].append(run(v))
        print(f"  warm-up {name}: {times[name][0]:.1f} s", flush=True)
    times = {name: [] for name in variants}
    for r in range(rounds):
        for name, v in variants.items():
            if r and times[name] and min(times[name]) > skip_slow_after:
                continue
            times[name].append(run(v))
        print(f"  round {r + 1}: " + ", ".join(f"{k} {min(t):.1f} s" for k, t in times.items()), flush=True)
    return {name: min(t) for name, t in times.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("/tmp/sfbench-engines"))
    parser.add_argument("--engines", default="spark,ray")
    parser.add_argument("--models", default="xgb_100x8,lgb_cat_1000x31")
    parser.add_argument("--forms", action="store_true", help="ours as a pandas UDF and in mapInArrow too (Spark)")
    args = parser.parse_args(argv)
    found = models(args.out)
    chosen = [m for m in args.models.split(",") if m]
    results = []  # (engine, model, {variant: rows/s})
    if "spark" in args.engines:
        from support_engines import spark_session

        spark = spark_session(cores=2, memory="6g")
        for i, name in enumerate(chosen):
            path, library, features, labels = found[name]
            df = spark_rows(spark, args.rows, features, labels)
            variants = spark_variants(spark, df, path, library, features, labels, args.forms and i == 0)
            print(f"spark {name}: ours - library on 2,000 rows: {spark_check(df, variants):.3g}", flush=True)
            best = best_of(variants, run_spark, args.rounds, skip_slow_after=60)
            results.append(("Spark", name, {k: args.rows / t for k, t in best.items()}))
            df.unpersist()
        spark.stop()
    if "ray" in args.engines:
        import ray

        from support_engines import start_ray

        start_ray(cores=2, object_store_mb=3000)
        for name in chosen:
            path, library, features, labels = found[name]
            ds = ray.data.from_arrow(arrow_rows(args.rows, features, labels)).materialize()
            variants = ray_variants(path, library, features, labels)
            best = best_of(variants, lambda v: run_ray(ds, *v), args.rounds, skip_slow_after=60)
            results.append(("Ray Data", name, {k: args.rows / t for k, t in best.items()}))
        ray.shutdown()
    print()
    print("| engine | model | ours rows/s | library's predict rows/s | floor rows/s | ours / library | floor / ours |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for engine, name, rates in results:
        print(f"| {engine} | {name} | {rates['ours']:,.0f} | {rates['library']:,.0f} | {rates['floor']:,.0f} | "
              f"{rates['ours'] / rates['library']:.1f}x | {rates['floor'] / rates['ours']:.2f}x |")
    extra = [(e, n, r) for e, n, r in results if len(r) > 3]
    for engine, name, rates in extra:
        print()
        print(f"{engine}, {name}: the forms of UDF (rows/s; ours / its floor)")
        print("| form | ours | floor | floor / ours |")
        print("|---|---:|---:|---:|")
        for form, ours, floor in (("Arrow UDF (iterator)", "ours", "floor"),
                                  ("pandas UDF (iterator)", "ours, pandas UDF", "floor, pandas UDF"),
                                  ("mapInArrow", "ours, mapInArrow", "floor, mapInArrow")):
            print(f"| {form} | {rates[ours]:,.0f} | {rates[floor]:,.0f} | {rates[floor] / rates[ours]:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
