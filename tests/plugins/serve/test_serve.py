"""``forge serve`` (plugins/serve): the application through Starlette's TestClient, and one real
uvicorn server on 127.0.0.1 (an ephemeral port, in a thread) answering concurrent clients, each
exactly the training library's prediction for its own rows (the micro-batcher alone:
test_batching.py).

Every request loop here is bounded, and nothing binds anything but 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
with warnings.catch_warnings():  # (newer Starlette prefers httpx2 for its TestClient; httpx works)
    warnings.simplefilter("ignore", UserWarning)
    from starlette.testclient import TestClient  # noqa: E402

import silvanforge as sf  # noqa: E402
from silvanforge import cli
from silvanforge_serve.app import make_app  # noqa: E402
from support_common import REPOSITORY  # noqa: E402
from support_serve import serving  # noqa: E402

FEATURES = [f"f{i}" for i in range(6)]
COLOURS = ["red", "green", "blue"]


# ------------------------------------------------------------------ models (trained here)
@pytest.fixture(scope="module")
def xgb_model(tmp_path_factory):
    """A binary XGBoost model with feature names and one categorical feature ("colour")."""
    import pandas as pd
    import xgboost as xgb

    rng = np.random.default_rng(7)
    n = 600
    frame = pd.DataFrame(rng.normal(size=(n, len(FEATURES))), columns=FEATURES)
    frame["colour"] = pd.Categorical(rng.choice(COLOURS, n), categories=COLOURS)
    y = (frame["f0"] + (frame["colour"] == "blue") * 1.5 - frame["f3"] > 0.3).astype(int)
    dtrain = xgb.DMatrix(frame, label=y, enable_categorical=True)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 4, "max_cat_to_onehot": 1,
                         "nthread": 1, "seed": 1}, dtrain, 20)
    path = tmp_path_factory.mktemp("serve") / "xgb.json"
    booster.save_model(str(path))
    return path, xgb.Booster(model_file=str(path)), sf.compile(str(path))


@pytest.fixture(scope="module")
def lgb_model(tmp_path_factory):
    """A three-class LightGBM model (predictions are rows x classes)."""
    import lightgbm as lgb

    rng = np.random.default_rng(11)
    X = rng.normal(size=(500, 5))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5).astype(int)
    booster = lgb.train({"objective": "multiclass", "num_class": 3, "num_leaves": 8, "verbose": -1,
                         "num_threads": 1, "seed": 3}, lgb.Dataset(X, y), 10)
    path = tmp_path_factory.mktemp("serve") / "lgb.txt"
    booster.save_model(str(path))
    return path, lgb.Booster(model_file=str(path)), sf.compile(str(path))


def _records(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        row = {name: float(v) for name, v in zip(FEATURES, rng.normal(size=len(FEATURES)))}
        row["colour"] = str(rng.choice(COLOURS))
        out.append(row)
    out[0]["f2"] = None  # missing
    return out


def _xgb_expected(booster, records: list[dict], margin: bool = False) -> np.ndarray:
    import pandas as pd
    import xgboost as xgb

    frame = pd.DataFrame(records, columns=[*FEATURES, "colour"]).astype({"f2": float})
    frame["colour"] = pd.Categorical(frame["colour"], categories=COLOURS)
    return booster.predict(xgb.DMatrix(frame, enable_categorical=True), output_margin=margin)


# ------------------------------------------------------------------ the application
def test_every_body_shape_answers_the_librarys_predictions(xgb_model):
    _, booster, cf = xgb_model
    records = _records(5, seed=1)
    expected = _xgb_expected(booster, records)
    columns = {name: [r[name] for r in records] for name in [*FEATURES, "colour"]}
    codes = [[*(r[name] for name in FEATURES), COLOURS.index(r["colour"])] for r in records]
    with TestClient(make_app(cf)) as client:
        for body in ({"rows": records}, {"columns": columns}, {"data": codes}):
            got = client.post("/predict", json=body)
            assert got.status_code == 200, got.text
            np.testing.assert_array_equal(np.float32(got.json()["predictions"]), expected)
        one = client.post("/predict", json=records[1]).json()["predictions"]
        np.testing.assert_array_equal(np.float32(one), expected[1:2])
        margins = client.post("/predict", json={"rows": records, "output_margin": True}).json()["predictions"]
        np.testing.assert_array_equal(np.float32(margins), _xgb_expected(booster, records, margin=True))
        assert client.post("/predict", json={"rows": []}).json() == {"predictions": []}


def test_predictions_of_several_outputs_are_rows_of_classes(lgb_model):
    _, booster, cf = lgb_model
    X = np.random.default_rng(2).normal(size=(4, 5))
    X[1, 3] = np.nan
    body = {"data": [[None if v != v else float(v) for v in row] for row in X]}
    with TestClient(make_app(cf)) as client:
        got = np.array(client.post("/predict", json=body).json()["predictions"])
        # one row a body, as services send them: floats and null (handed to the batcher as they
        # are), or with an integer among them
        one = [client.post("/predict", json={"data": [row]}).json()["predictions"] for row in body["data"]]
        integers = [client.post("/predict", json={"data": [[int(row[0]), *row[1:]]]}).json()["predictions"]
                    for row in body["data"]]
    assert got.shape == (4, 3)
    np.testing.assert_allclose(got, booster.predict(X), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.concatenate(one), booster.predict(X), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.concatenate(integers), booster.predict(np.column_stack([np.trunc(X[:, 0]), X[:, 1:]])),
                               rtol=1e-12, atol=1e-12)


def test_contributions_and_leaves_come_beside_the_predictions(xgb_model, lgb_model):
    """``pred_contribs`` / ``pred_leaf`` in a body: each row's SHAP contributions or leaves beside
    its predictions, as the library's own (XGBoost's ``pred_contribs``, LightGBM's
    ``pred_contrib``, three classes' laid out as LightGBM does), in any body shape and with
    margins; requests asking for different outputs are answered each its own."""
    import pandas as pd
    import xgboost as xgb

    _, booster, cf = xgb_model
    records = _records(4, seed=12)
    frame = pd.DataFrame(records, columns=[*FEATURES, "colour"]).astype({"f2": float})
    frame["colour"] = pd.Categorical(frame["colour"], categories=COLOURS)
    dmatrix = xgb.DMatrix(frame, enable_categorical=True)
    want_phi = booster.predict(dmatrix, pred_contribs=True)
    want_leaf = booster.predict(dmatrix, pred_leaf=True)
    ours = {"contributions": cf.predict(frame, pred_contribs=True), "leaves": cf.predict(frame, pred_leaf=True)}
    with TestClient(make_app(cf)) as client:
        for body, key, want, rows in (({"rows": records, "pred_contribs": True}, "contributions", want_phi, slice(None)),
                                      ({"rows": records, "pred_leaf": True}, "leaves", want_leaf, slice(None)),
                                      ({"rows": records, "pred_contrib": True, "output_margin": True}, "contributions",
                                       want_phi, slice(None)),
                                      ({**records[2], "pred_leaf": True}, "leaves", want_leaf, slice(2, 3))):
            got = client.post("/predict", json=body)
            assert got.status_code == 200, got.text
            answer = got.json()
            assert set(answer) == {"predictions", key}, answer
            np.testing.assert_allclose(np.array(answer[key]), want[rows], rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(answer[key], ours[key][rows])  # (what predict answers, exactly)
            expected = _xgb_expected(booster, records, margin=body.get("output_margin", False))
            np.testing.assert_array_equal(np.float32(answer["predictions"]), expected[rows])
        for body in ({"rows": records, "pred_contribs": 1}, {"rows": records, "pred_contribs": True, "pred_leaf": True}):
            got = client.post("/predict", json=body)
            assert got.status_code == 400 and "\n" not in got.json()["error"], got.text
        assert client.post("/predict", json={"rows": [], "pred_leaf": True}).json() == {"predictions": [],
                                                                                       "leaves": []}
        model = client.get("/model").json()  # (what was built since the app was made, too)
        assert model["serving"]["beside_predictions"] == ["pred_contribs", "pred_leaf"]
        assert {"pred_contribs", "pred_leaf"} <= set(model["summary"]["outputs_built"]), model["summary"]

    _, lgb_booster, lgb_cf = lgb_model
    X = np.random.default_rng(13).normal(size=(3, 5))
    with TestClient(make_app(lgb_cf)) as client:
        answer = client.post("/predict", json={"data": X.tolist(), "pred_contrib": True}).json()
    np.testing.assert_allclose(answer["contributions"], lgb_booster.predict(X, pred_contrib=True), rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_allclose(answer["predictions"], lgb_booster.predict(X), rtol=1e-12, atol=1e-12)


def test_a_batch_asking_for_several_outputs_answers_each_request_its_own(xgb_model):
    """The batcher's calls group requests by what they ask for: one predict call for values and
    one for margins, one of contributions for every request asking for them (whichever
    predictions beside); every request gets its own rows' answers."""
    from silvanforge_serve.batching import MicroBatcher

    _, _, cf = xgb_model
    calls = []

    def predict(rows, margin):
        calls.append(("predict", len(rows), margin))
        return cf.predict(rows, output_margin=margin)

    def explain(rows, output):
        calls.append((output, len(rows)))
        return cf.predict(rows, **{output: True})

    rng = np.random.default_rng(14)
    rows = [np.column_stack([rng.normal(size=(k, len(FEATURES))), rng.integers(0, 3, k)]) for k in (1, 2, 3, 1)]
    asks = [(False, None), (False, "pred_contribs"), (True, "pred_contribs"), (False, None)]
    batcher = MicroBatcher(predict, window_s=0.05, explain=explain)
    try:
        futures = [batcher.submit(r, margin, explained) for r, (margin, explained) in zip(rows, asks)]
        answers = [f.result(10) for f in futures]
    finally:
        batcher.close()
    for r, (margin, explained), answer in zip(rows, asks, answers):
        values = answer if explained is None else answer[0]
        np.testing.assert_array_equal(values, cf.predict(r, output_margin=margin))
        if explained is not None:
            np.testing.assert_array_equal(answer[1], cf.predict(r, pred_contribs=True))
    assert sorted(calls, key=str) == sorted([("predict", 4, False), ("predict", 3, True), ("pred_contribs", 5)],
                                            key=str), calls
    plain = MicroBatcher(predict)
    try:
        with pytest.raises(ValueError, match="predictions only"):
            plain.submit(rows[0], explained="pred_leaf")
    finally:
        plain.close()


def test_rows_come_as_lists_only_where_asked_for_and_plain(xgb_model):
    """``parse_body``: a row of floats and nulls as the list it was parsed into only with
    ``lists``; integers, booleans and several rows as float64 arrays; a model that hashes its
    categories (CatBoost's) reads objects, never lists."""
    from silvanforge_serve.bodies import parse_body

    _, _, cf = xgb_model
    width = cf.forest.input_features
    floats = json.dumps({"data": [[0.5] * (width - 1) + [None]]}).encode()
    rows, margin, _ = parse_body(floats, cf.forest, lists=True)
    assert rows == [[0.5] * (width - 1) + [None]] and margin is False
    for body, lists in ((floats, False), (json.dumps({"data": [[1] * width]}).encode(), True),
                        (json.dumps({"data": [[True] + [0.5] * (width - 1)]}).encode(), True),
                        (json.dumps({"data": [[0.5] * width] * 2}).encode(), True)):
        rows, _, _ = parse_body(body, cf.forest, lists=lists)
        assert type(rows) is np.ndarray and rows.dtype == np.float64, body
    cb = pytest.importorskip("catboost")
    import pandas as pd

    rng = np.random.default_rng(9)
    frame = pd.DataFrame({"a": rng.normal(size=200), "colour": rng.choice(COLOURS, 200)})
    model = cb.CatBoostRegressor(iterations=5, depth=2, verbose=False, cat_features=["colour"]).fit(
        frame, frame["a"] + (frame["colour"] == "red"))
    hashed = sf.compile(model).forest
    assert hashed.hashed_categories or hashed.hashed_combinations
    rows, _, _ = parse_body(json.dumps({"data": [[0.5, 1.5]]}).encode(), hashed, lists=True)
    assert type(rows) is np.ndarray and rows.dtype == object


def test_features_named_as_a_bodys_keys_are_read_as_features(tmp_path):
    """A model whose features are named "data" and "output_margin": a record holding them is a
    record (one row), not rows of numbers nor a request for margins."""
    import lightgbm as lgb

    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 3))
    names = ["data", "output_margin", "x"]
    booster = lgb.train({"objective": "regression", "num_leaves": 8, "verbose": -1, "num_threads": 1},
                        lgb.Dataset(X, X[:, 0] - X[:, 1] + X[:, 2], feature_name=names), 5)
    path = tmp_path / "named.txt"
    booster.save_model(str(path))
    row = {"data": 0.5, "output_margin": -1.25, "x": 2.0}
    expected = booster.predict(np.array([[0.5, -1.25, 2.0]]))
    with TestClient(make_app(sf.compile(str(path)))) as client:
        for body in (row, {"rows": [row]}):
            got = client.post("/predict", json=body)
            assert got.status_code == 200, got.text
            np.testing.assert_allclose(got.json()["predictions"], expected, rtol=1e-12)
        # (a feature's name beside rows is no request for margins; rows of numbers are no record)
        for body in ({"rows": [row], "output_margin": True}, {"data": [[0.5, -1.25, 2.0]]}):
            assert client.post("/predict", json=body).status_code == 400
        # (the 400 of a flag that is a feature's name says why the flag is not read)
        got = client.post("/predict", json={"rows": [row], "output_margin": True})
        assert "'output_margin' is one of this model's features" in got.json()["error"], got.text
        got = client.post("/predict", json={"rows": [row], "data": 0.5})
        assert got.status_code == 400 and "never as a shape of the body" in got.json()["error"], got.text


def test_a_model_without_feature_names_is_sent_rows_of_numbers(tmp_path):
    """Records and columns name features the model does not have: the 400 says how its rows go
    (``data``, its column order), and they are answered so."""
    import xgboost as xgb

    rng = np.random.default_rng(9)
    X = rng.normal(size=(300, 3))
    booster = xgb.train({"objective": "reg:squarederror", "max_depth": 3, "nthread": 1},
                        xgb.DMatrix(X, X[:, 0] - X[:, 2]), 5)
    path = tmp_path / "unnamed.json"
    booster.save_model(str(path))
    with TestClient(make_app(sf.compile(str(path)))) as client:
        for what, body in (("records", {"f0": 1.0, "f1": 2.0, "f2": 3.0}), ("records", {"rows": [{"a": 1.0}]}),
                           ("columns", {"columns": {"a": [1.0]}})):
            got = client.post("/predict", json=body)
            assert got.status_code == 400, got.text
            message = got.json()["error"]
            assert message.startswith(f"{what} name their features") and '{"data": [[' in message \
                and "3 values each" in message, message
        got = client.post("/predict", json={"data": X[:2].tolist()})
        assert got.status_code == 200, got.text
        np.testing.assert_array_equal(np.float32(got.json()["predictions"]), booster.inplace_predict(X[:2]))


BAD_BODIES = {
    "not JSON": (b'{"rows": [', "not JSON"),
    "a JSON array": (b"[[1, 2]]", "JSON array"),
    "an unknown feature": (json.dumps({"rows": [{**_records(1, 3)[0], "nonesuch": 1.0}]}).encode(), "nonesuch"),
    "a missing feature": (json.dumps({"rows": [{"f0": 1.0}]}).encode(), "missing"),
    "a wrong row width": (json.dumps({"data": [[1.0, 2.0]]}).encode(), "2 values; the model expects 7"),
    "a string in data": (json.dumps({"data": [[1, 2, 3, 4, 5, "x", 0]]}).encode(), "not a number"),
    "a label the model never saw": (json.dumps({"rows": [{**_records(1, 3)[0], "colour": 7}]}).encode(), "colour"),
    "a number beside a label": (json.dumps({"rows": [_records(1, 3)[0], {**_records(1, 3)[0], "colour": 2}]}).encode(),
                                "'colour' is the number 2"),
    "ragged columns": (json.dumps({"columns": {"f0": [1.0], "f1": [1.0, 2.0]}}).encode(), "different lengths"),
    "a stray key": (json.dumps({"data": [[0] * 7], "extra": 1}).encode(), "extra"),
    "a bad output_margin": (json.dumps({"data": [[0] * 7], "output_margin": "yes"}).encode(), "output_margin"),
    "an integer past float64 in data": (b'{"data": [[1' + b"0" * 400 + b', 0, 0, 0, 0, 0, 0]]}', "too large"),
    "an integer past float64 in a record": (json.dumps({"rows": [{**_records(1, 3)[0], "f0": 10 ** 400}]}).encode(),
                                            "too large"),
    "arrays nested past the parser": (b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests"),
}


def test_bad_bodies_get_a_400_with_one_line_and_the_server_stays_up(xgb_model):
    _, booster, cf = xgb_model
    records = _records(2, seed=4)
    with TestClient(make_app(cf)) as client:
        for what, (body, needle) in BAD_BODIES.items():
            got = client.post("/predict", content=body, headers={"content-type": "application/json"})
            assert got.status_code == 400, (what, got.text)
            message = got.json()["error"]
            assert needle in message and "\n" not in message, (what, message)
        good = client.post("/predict", json={"rows": records})
        assert good.status_code == 200
        np.testing.assert_array_equal(np.float32(good.json()["predictions"]), _xgb_expected(booster, records))


@pytest.mark.parametrize("fast_json", [True, False])
def test_bodies_mean_what_the_standard_librarys_json_reads(xgb_model, monkeypatch, fast_json):
    """Bodies read by orjson where it reads them and by the standard library where it does not
    (Infinity literals, numbers past float64's range, UTF-16): every one reads as ``json.loads``
    reads it, a NaN literal as null (an integer past 64 bits as the float64 its row holds),
    errors name what it finds, and answers are JSON with null for a NaN; likewise without orjson."""
    from silvanforge_serve import json_io

    if not fast_json:
        monkeypatch.setattr(json_io, "orjson", None)
    elif json_io.orjson is None:
        pytest.skip("orjson is not installed")
    texts = ['{"data": [[1.5, NaN, -Infinity, 2, 18446744073709551617, 0.1, 1e-7]]}', '[1, 2]', r'{"a": "\ud800"}',
             '{"x": 1, "x": 2}', '{"n": 1e308, "m": -0.0, "z": 123456789012345678}']
    for text in texts:
        for body in (text.encode(), text.encode("utf-16")):
            got, expected = json_io.loads(body), json.loads(body, parse_constant=_nan_as_none)
            assert json.dumps(got) == json.dumps(expected), text
    # NaN literals alone (Python's json.dumps of a missing number): read as null, the same missing
    # value to every reader of a body; a NaN in a string stays; a string with an escaped quote
    # leaves the body to the standard library
    for text in ('{"data": [[NaN, 1.5, NaN]], "k": "NaN, [NaN]"}', '{"rows": [{"NaN": NaN, "b": "x"}]}',
                 '{"data": [[NaN]], "output_margin": NaN}'):
        assert json_io.loads(text.encode()) == json.loads(text, parse_constant=_nan_as_none), text
    escaped = b'{"rows": [{"a": NaN, "b": "x\\"NaN"}]}'
    assert json_io.loads(escaped) == {"rows": [{"a": None, "b": 'x"NaN'}]}
    # an integer of more digits than 64 bits hold: the float64 a row holds of it either way
    assert float(json_io.loads(b"[123456789012345678901234567890]")[0]) == float(123456789012345678901234567890)
    for bad in (b'{"rows": [', b"", b"\xff\xfe{"):
        with pytest.raises(ValueError):
            json_io.loads(bad)
    doc = {"predictions": [0.5, float("nan"), float("inf"), 1e-7], "error": "a\nb", "odd": {3: 4},
           "numpy": [np.float64(0.5), np.float64("nan"), np.int64(3), np.float32("nan"), np.array([1.5, np.nan])]}
    assert json.loads(json_io.dumps(doc)) == {"predictions": [0.5, None, None, 1e-7], "error": "a\nb", "odd": {"3": 4},
                                              "numpy": [0.5, None, 3, None, [1.5, None]]}
    _, booster, cf = xgb_model
    records = _records(3, seed=5)
    body = json.dumps({"data": [[*(r[name] for name in FEATURES), COLOURS.index(r["colour"])] for r in records]})
    with TestClient(make_app(cf)) as client:
        got = client.post("/predict", content=body.replace("null", "NaN"), headers={"content-type": "application/json"})
        assert got.status_code == 200, got.text
        np.testing.assert_array_equal(np.float32(got.json()["predictions"]), _xgb_expected(booster, records))


def _nan_as_none(name: str):
    return None if name == "NaN" else float(name)


def test_a_body_in_several_messages_is_read_whole_and_a_client_gone_is_not_answered(xgb_model):
    """POST /predict as ASGI messages: a body in three chunks answers as the whole body does; a
    disconnect before the body ends sends nothing."""
    import asyncio

    _, booster, cf = xgb_model
    records = _records(3, seed=8)
    body = json.dumps({"rows": records}).encode()
    app = make_app(cf)
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/predict", "raw_path": b"/predict", "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json")], "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 80)}

    def call(messages):
        sent = []

        async def receive():
            return messages.pop(0)

        async def send(message):
            sent.append(message)
        asyncio.run(app(scope, receive, send))
        return sent
    chunks = [body[:5], body[5:40], body[40:]]
    sent = call([{"type": "http.request", "body": c, "more_body": i < 2} for i, c in enumerate(chunks)])
    assert sent[0]["status"] == 200 and dict(sent[0]["headers"])[b"content-length"] == str(len(sent[1]["body"])).encode()
    np.testing.assert_array_equal(np.float32(json.loads(sent[1]["body"])["predictions"]), _xgb_expected(booster, records))
    assert call([{"type": "http.request", "body": chunks[0], "more_body": True}, {"type": "http.disconnect"}]) == []
    assert call([{"type": "http.disconnect"}]) == []  # (gone before its body)
    app.state.batcher.close()


def test_health_and_model_describe_the_server_and_the_compiled_plan(xgb_model):
    _, _, cf = xgb_model
    with TestClient(make_app(cf, window_us=300, max_queue=7)) as client:
        client.post("/predict", json={"rows": _records(3, seed=5)})
        health = client.get("/health").json()
        cf.wait()  # (the plan's forms built: /model says so, though the app was made while they built)
        model = client.get("/model").json()
    assert health["status"] == "ok" and health["requests"] == 1 and health["predict_calls"] == 1
    assert health["small_call_us"] > 0  # (a call of 3 rows: measured, whether the next few rows go on the loop)
    assert model["feature_names"] == [*FEATURES, "colour"] and model["outputs"] == 1
    assert model["features"] == 7 and model["categorical_features"] == {"6": COLOURS}
    assert model["plan"] == cf.show("plan") and model["model"].startswith("xgboost")
    assert model["serving"]["batch_window_us"] == 300 and model["serving"]["max_queue"] == 7


def test_a_full_queue_answers_503_and_the_waiting_requests_are_still_answered(xgb_model):
    _, _, cf = xgb_model
    entered, release = threading.Event(), threading.Event()

    def blocking(rows, margin):
        entered.set()
        release.wait(10)
        return cf.predict(rows, output_margin=margin)

    app = make_app(cf, window_us=0, max_queue=1, predict=blocking)
    body = {"rows": _records(1, seed=6)}
    with TestClient(app) as client:
        answers = []
        first = threading.Thread(target=lambda: answers.append(client.post("/predict", json=body)))
        first.start()
        assert entered.wait(10)  # the worker is blocked on the first request
        second = threading.Thread(target=lambda: answers.append(client.post("/predict", json=body)))
        second.start()
        for _ in range(1000):  # bounded: the second request joins the line of one
            if app.state.batcher.queued() == 1:
                break
            time.sleep(0.005)
        refused = client.post("/predict", json=body)
        assert refused.status_code == 503 and "1 request is waiting already" in refused.json()["error"]
        release.set()
        first.join(10)
        second.join(10)
        assert [a.status_code for a in answers] == [200, 200]
        assert client.get("/health").json()["refused_queue_full"] == 1


# ------------------------------------------------------------------ a real server
@pytest.fixture
def live_server(xgb_model):
    """uvicorn on 127.0.0.1, a port the system picks, in a thread; yields (url, app)."""
    _, _, cf = xgb_model
    app = make_app(cf, window_us=3000)  # a wide window: the concurrent clients below meet in it
    with serving(app) as url:
        yield url, app


def test_concurrent_clients_each_get_the_librarys_prediction_for_their_own_rows(live_server, xgb_model):
    url, app = live_server
    _, booster, _ = xgb_model
    clients, requests_each = 8, 6
    failures, done = [], []
    start = threading.Barrier(clients)

    def client(c: int):
        with httpx.Client(base_url=url, timeout=10) as http:
            start.wait(10)
            for r in range(requests_each):
                records = _records(1 + (c + r) % 3, seed=100 * c + r)
                if c == 0 and r == 2:  # a bad body among them: refused alone
                    got = http.post("/predict", json={"rows": [{**records[0], "nonesuch": 1}]})
                    if got.status_code != 400:
                        failures.append(("bad body", got.status_code, got.text))
                    continue
                body = {"rows": records}
                if c % 2:  # (rows of floats and nulls: handed to the batcher as lists, gathered with records)
                    body = {"data": [[*(record[name] for name in FEATURES), float(COLOURS.index(record["colour"]))]
                                     for record in records][:1]}
                    records = records[:1]
                got = http.post("/predict", json=body)
                expected = _xgb_expected(booster, records)
                if got.status_code != 200 or not np.array_equal(np.float32(got.json()["predictions"]), expected):
                    failures.append((c, r, got.status_code, got.text, expected))
                done.append(1)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert failures == []
    assert len(done) == clients * requests_each - 1
    stats = httpx.get(f"{url}/health", timeout=10).json()
    assert stats["requests"] == len(done)
    # micro-batching merged requests: fewer predict calls than requests
    assert stats["predict_calls"] < stats["requests"] and stats["largest_batch"] > 1, stats


# ------------------------------------------------------------------ the command
def test_forge_serve_help_and_a_missing_model_is_one_line(capsys, tmp_path):
    assert cli.main(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--batch-window-us" in out and "--max-queue" in out and "--prepare" in out
    assert cli.main(["serve", str(tmp_path / "nonesuch.json"), "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "nonesuch.json" in err
    assert "Traceback" not in err
    model = str(REPOSITORY / "examples" / "model.json")
    assert cli.main(["serve", model, "--port", "0", "--prepare", "pred_contribs,shapley"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "'shapley'" in err and "pred_leaf" in err


def test_outputs_a_server_cannot_answer_are_a_400_and_prepared_ones_are_built_first():
    """A model without covers has no path-dependent contributions, and a server answering with
    another predict has none of its own: their bodies asking get a 400 naming why, the server
    stays up; ``prepare_outputs`` builds the contributions' tables and the leaves' model before
    any request (the first asking then finds them), and refuses what it cannot build."""
    from silvanforge_serve.app import prepare_outputs

    forest = sf.Forest(trees=[sf.Tree.from_nodes([1, -1, -1], [2, -1, -1], [0, -1, -1], [0.5, 0, 0],
                                                 [0.0, 1.0, 2.0])], num_features=1)
    uncovered = sf.compile(forest)
    with TestClient(make_app(uncovered)) as client:
        # (no rows asking is refused as rows are: what the model cannot compute for any)
        for data in ([[0.1]], []):
            got = client.post("/predict", json={"data": data, "pred_contribs": True})
            assert got.status_code == 400 and "no covers" in got.json()["error"], got.text
        assert client.post("/predict", json={"data": [], "pred_leaf": True}).json() == {"predictions": [],
                                                                                       "leaves": []}
        leaves = client.post("/predict", json={"data": [[0.1], [0.9]], "pred_leaf": True}).json()
        assert leaves["predictions"] == [1.0, 2.0]
        np.testing.assert_array_equal(leaves["leaves"], uncovered.predict(np.array([[0.1], [0.9]]), pred_leaf=True))
    with pytest.raises(sf.InputError, match="cannot serve pred_contribs: .*no covers"):
        prepare_outputs(uncovered, ["pred_contribs"])

    with TestClient(make_app(uncovered, predict=lambda rows, margin: rows[:, 0])) as client:
        got = client.post("/predict", json={"data": [[0.1]], "pred_leaf": True})
        assert got.status_code == 400 and "predictions only" in got.json()["error"], got.text
        assert client.post("/predict", json={"data": [[0.25]]}).json() == {"predictions": [0.25]}
        assert client.get("/model").json()["serving"]["beside_predictions"] == []

    covered = sf.compile(dataclasses.replace(forest, trees=[dataclasses.replace(forest.trees[0],
                                                                                cover=np.array([4.0, 3.0, 1.0]))]))
    prepare_outputs(covered, ["pred_contribs", "pred_leaf"])
    assert covered._contribution_tables is not None and "pred_leaf" in covered._outputs
    with TestClient(make_app(covered)) as client:
        got = client.post("/predict", json={"data": [[0.1], [0.9]], "pred_contribs": True}).json()
    # E[f] = (3 * 1 + 1 * 2) / 4 = 1.25; the row's leaf minus that goes to the feature
    np.testing.assert_allclose(got["contributions"], [[-0.25, 1.25], [0.75, 1.25]])


def test_forge_serve_answers_and_stops_cleanly_on_sigterm(tmp_path):
    model = REPOSITORY / "examples" / "model.json"
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from silvanforge.cli import main; sys.exit(main())",
                             "serve", str(model), "--port", "0", "--host", "127.0.0.1", "--log-level", "warning"],
                            stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        for _ in range(50):  # bounded: the command prints where it listens once the model is ready
            line = proc.stderr.readline()
            if "serving" in line or not line:
                break
        assert "http://127.0.0.1:" in line, line
        port = int(line.split("http://127.0.0.1:")[1].split()[0])
        got = httpx.post(f"http://127.0.0.1:{port}/predict", json={"data": [[0.5] * 8]}, timeout=10)
        assert got.status_code == 200 and len(got.json()["predictions"]) == 1
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down, then ends as SIGTERM would (its parent sees why it stopped)
        assert proc.wait(timeout=20) in (0, -signal.SIGTERM)
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stderr.close()

