"""What ``GET /model`` says of a model's categorical features: their labels, or null where the
model knows its categories by hash (CatBoost's), so a client can tell which features take labels."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("starlette")
cb = pytest.importorskip("catboost")
pd = pytest.importorskip("pandas")
pytest.importorskip("httpx")
with warnings.catch_warnings():  # (newer Starlette prefers httpx2 for its TestClient; httpx works)
    warnings.simplefilter("ignore", UserWarning)
    from starlette.testclient import TestClient

import silvanforge as sf
from silvanforge_serve.app import make_app


def test_a_catboost_models_categorical_features_are_named_without_labels():
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"age": rng.normal(size=200), "colour": rng.choice(["red", "blue"], 200),
                          "size": rng.choice(["s", "m", "l"], 200)})
    model = cb.CatBoostRegressor(iterations=5, depth=3, cat_features=["colour", "size"], verbose=0, thread_count=1,
                                 random_seed=1, allow_writing_files=False)
    model.fit(frame, frame.age + (frame.colour == "red"))
    cf = sf.compile(model)
    with TestClient(make_app(cf)) as client:
        described = client.get("/model").json()
        answered = client.post("/predict", json={"rows": frame.iloc[:3].to_dict("records")}).json()
    assert described["categorical_features"] == {"1": None, "2": None}
    np.testing.assert_allclose(answered["predictions"], model.predict(frame.iloc[:3]), rtol=1e-12)
