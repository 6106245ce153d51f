"""Bodies ``POST /predict`` refuses that a JSON reader would read silently: an object naming a
key twice (the reader keeps the last value), in every shape of body, while a label holding a colon
(which sends the body to the slower reading that keeps every key) is read as it is."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")
xgb = pytest.importorskip("xgboost")
pd = pytest.importorskip("pandas")
with warnings.catch_warnings():  # (newer Starlette prefers httpx2 for its TestClient; httpx works)
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient  # noqa: E402

import silvanforge as sf  # noqa: E402
from silvanforge_serve.app import make_app  # noqa: E402

LABELS = ["red", "12:30", 'a\\":b']  # (the last: an escaped quote and a colon in a label)


@pytest.fixture(scope="module")
def compiled():
    rng = np.random.default_rng(4)
    frame = pd.DataFrame({"age": rng.normal(size=300), "slot": pd.Categorical(rng.choice(LABELS, 300), categories=LABELS)})
    model = xgb.XGBRegressor(n_estimators=5, max_depth=3, enable_categorical=True, tree_method="hist")
    return sf.compile(model.fit(frame, frame.age + (frame.slot == "12:30")), threads=1)


@pytest.mark.parametrize("body,key", [
    ('{"age": 1, "age": 2, "slot": "red"}', "age"),
    ('{"rows": [{"age": 1, "slot": "red"}, {"age": 1, "slot": "red", "slot": "12:30"}]}', "slot"),
    ('{"columns": {"age": [1], "slot": ["red"], "age": [2]}}', "age"),
    ('{"data": [[1, 0]], "output_margin": true, "output_margin": false}', "output_margin"),
])
def test_a_key_twice_in_one_object_is_a_400(compiled, body, key):
    with TestClient(make_app(compiled)) as client:
        answer = client.post("/predict", content=body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == f"the key {key!r} twice in one object of the body (which value is meant?)"
        assert client.get("/health").status_code == 200


def test_labels_holding_colons_and_keys_once_are_read(compiled):
    records = [{"age": 0.5, "slot": label} for label in LABELS]
    with TestClient(make_app(compiled)) as client:
        answer = client.post("/predict", json={"rows": records})
        assert answer.status_code == 200, answer.text
        np.testing.assert_allclose(answer.json()["predictions"], compiled.predict(records), rtol=1e-6)
        answer = client.post("/predict", content='{"age" : 0.5 ,\n "slot" : "12:30"}')
        assert answer.status_code == 200, answer.text
        np.testing.assert_allclose(answer.json()["predictions"], compiled.predict(records[1]), rtol=1e-6)
