"""What ``forge serve`` refuses to read whole: a body over its limit is a 413, the connection
closed, and the server answers the requests after it."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

import silvanforge as sf  # noqa: E402
from silvanforge_serve.app import make_app  # noqa: E402
from support_serve import serving  # noqa: E402


def test_a_body_over_the_limit_is_a_413_and_the_server_stays_up():
    """A body larger than ``max_body_bytes`` is refused (413, one line saying how much is read)
    by its declared length or, sent in chunks without one, by the bytes read so far; a body
    within it is answered, and so are the requests after a refused one."""
    forest = sf.Forest(trees=[sf.Tree.from_nodes([1, -1, -1], [2, -1, -1], [0, -1, -1], [0.5, 0, 0],
                                                 [0.0, 1.0, 2.0])], num_features=2)
    cf = sf.compile(forest)
    data = np.random.default_rng(2).random((20, 2)).round(6)
    body = json.dumps({"data": data.tolist()}).encode()
    app = make_app(cf, max_body_bytes=len(body))
    with serving(app) as url:
        with httpx.Client(base_url=url, timeout=10) as http:
            ok = http.post("/predict", content=body, headers={"content-type": "application/json"})
            assert ok.status_code == 200, ok.text
            np.testing.assert_array_equal(ok.json()["predictions"], cf.predict(data))
            big = body + b" "  # (one byte over: JSON still, but not read)
            got = http.post("/predict", content=big, headers={"content-type": "application/json"})
            assert got.status_code == 413 and got.headers["connection"] == "close", got.text
            assert f"larger than {len(body)} bytes" in got.json()["error"]

            def chunks():  # (no length declared: counted as the chunks come)
                for start in range(0, len(big), 100):
                    yield big[start:start + 100]

            got = http.post("/predict", content=chunks(), headers={"content-type": "application/json"})
            assert got.status_code == 413, got.text
            again = http.post("/predict", content=body, headers={"content-type": "application/json"})
            assert again.status_code == 200 and again.json() == ok.json()
        assert httpx.get(f"{url}/model", timeout=10).json()["serving"]["max_body_bytes"] == len(body)
    with pytest.raises(sf.InputError, match="at least 1 byte"):
        make_app(cf, max_body_bytes=0)
