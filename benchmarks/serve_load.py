"""A bounded load test of ``forge serve`` on loopback: our compiled predict against the same server
answering with the training library's own predict (XGBoost's ``inplace_predict``, LightGBM's
``Booster.predict``).

    python benchmarks/serve_load.py [--model M.json] [--clients 1,8,64] [--requests 200]
                                    [--window-us 200] [--threads 1] [--workers 1] [--repeat 3] [--client raw|httpx]
                                    [--body data|records] [--explain pred_contribs|pred_leaf] [--floor]
                                    [--markdown F] [--plot F.png]

Each server runs in a process of its own (uvicorn on 127.0.0.1, a port the system picks, the
same application from ``silvanforge_serve.app``: bodies read and checked on the event loop,
requests micro-batched on one worker thread; with ``--workers N``, N such processes on the
port, as ``forge serve --workers N`` runs them); only the function answering a batch differs.
The clients run in this process: C concurrent clients (asyncio tasks, one keep-alive connection
each; a minimal HTTP client by default, httpx with ``--client httpx``) send a fixed number of requests each, one row per request (``{"data": [[...]]}``,
or with ``--body records`` one record by feature name, ``{"f0": 1.5, "colour": "red", ...}``),
and every request's latency is kept; with ``--explain pred_contribs`` (or ``pred_leaf``) each
request also asks for its row's SHAP contributions (leaves), which the library-backed server
computes with the library's own (XGBoost's ``predict(DMatrix, pred_contribs=True)``, LightGBM's
``pred_contrib``).  It prints requests per second and p50 / p99 latency for
each client count and server (the best of ``--repeat`` rounds, the servers taking turns), the
requests each predict call answered, and the ratio of throughputs.  Without ``--model`` it trains
an XGBoost model of 100 trees of depth 8 on 28 features (synthetic data, fixed seed).
Both servers' answers are checked equal on a sample of rows before anything is timed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SERVERS = ("silvanforge", "library")


def train_model(out: Path) -> Path:
    import xgboost as xgb

    rng = np.random.default_rng(2026)
    X = rng.normal(size=(20_000, 28)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] * X[:, 2] - np.sin(X[:, 3]) + 0.3 * rng.normal(size=len(X)) > 0).astype(int)
    params = {"max_depth": 8, "eta": 0.1, "objective": "binary:logistic", "nthread": 2, "seed": 1}
    path = out / "xgb_100x8_f28.json"
    xgb.train(params, xgb.DMatrix(X, y, feature_names=[f"f{i}" for i in range(X.shape[1])]), 100).save_model(path)
    return path


# ------------------------------------------------------------------ the server process
def _serve(kind: str, model: str, window_us: float, threads: int, conn, workers: int = 1) -> None:
    """Child process: the server answering with ``kind``'s predict (``workers`` processes of it,
    forked here); sends its port, then serves until SIGTERM."""
    import silvanforge as sf
    from silvanforge_serve.app import make_app, make_server
    from silvanforge_serve.workers import listen_workers, run_workers

    if kind == "floor":
        return _serve_constant(conn)
    cf = sf.compile(model, threads=threads).wait()
    sockets = listen_workers("127.0.0.1", 0, workers)

    def serve_one(worker: int = 0) -> None:
        predict = name = explain = None
        if kind == "library":  # (made in the worker: the library's threads do not survive a fork)
            predict, name = library_predict(model, threads)
            explain = library_explain(model, threads)
        app = make_app(cf, threads=threads, window_us=window_us, predict=predict, predict_name=name, explain=explain)
        make_server(app, log_level="error").run(sockets=[sockets[worker % len(sockets)]])

    conn.send(sockets[0].getsockname()[1])
    conn.close()
    serve_one() if workers == 1 else run_workers(serve_one, workers)


def _serve_constant(conn) -> None:
    """Child process: the floor, uvicorn answering every request with one constant body after
    reading its own (no routing, no JSON, no model): what this machine's HTTP and clients allow."""
    import uvicorn

    from silvanforge_serve.app import listen

    body = b'{"predictions":[0.5]}'
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": body})
    sock = listen("127.0.0.1", 0)
    conn.send(sock.getsockname()[1])
    conn.close()
    uvicorn.Server(uvicorn.Config(app, log_level="error", access_log=False, lifespan="off")).run(sockets=[sock])


def library_predict(model: str, threads: int):
    """``(predict(rows, output_margin), name)``: the model file's own library answering a batch,
    as a service built on it would: XGBoost's ``inplace_predict``, LightGBM's ``Booster.predict``."""
    if model.endswith(".txt"):
        import lightgbm as lgb

        booster = lgb.Booster(model_file=model)

        def predict(rows, output_margin):
            return booster.predict(rows, raw_score=output_margin, num_threads=threads)
        return predict, "lightgbm Booster.predict"
    import xgboost as xgb

    booster = xgb.Booster(model_file=model)
    booster.set_param({"nthread": threads})

    def predict(rows, output_margin):
        return booster.inplace_predict(rows, predict_type="margin" if output_margin else "value")
    return predict, "xgboost inplace_predict"


def library_explain(model: str, threads: int):
    """``explain(rows, output)``: the model file's own library answering ``pred_contribs`` or
    ``pred_leaf`` for a batch (XGBoost's ``Booster.predict`` of a DMatrix, LightGBM's
    ``pred_contrib`` / ``pred_leaf``)."""
    if model.endswith(".txt"):
        import lightgbm as lgb

        booster = lgb.Booster(model_file=model)

        def explain(rows, output):
            keyword = {"pred_contribs": "pred_contrib", "pred_leaf": "pred_leaf"}[output]
            return booster.predict(rows, num_threads=threads, **{keyword: True})
        return explain
    import xgboost as xgb

    booster = xgb.Booster(model_file=model)
    booster.set_param({"nthread": threads})
    types = booster.feature_types

    def explain(rows, output):
        matrix = xgb.DMatrix(rows, feature_names=booster.feature_names, feature_types=types,
                             enable_categorical=bool(types and "c" in types), nthread=threads)
        return booster.predict(matrix, **{output: True})
    return explain


class Server:
    def __init__(self, kind: str, model: str, window_us: float, threads: int, workers: int = 1):
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(kind, model, window_us, threads, child, workers), daemon=True)
        self.process.start()
        if not parent.poll(300):
            self.stop()
            raise RuntimeError(f"the {kind} server did not start")
        self.url = f"http://127.0.0.1:{parent.recv()}"

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.terminate()  # SIGTERM: uvicorn shuts down
            self.process.join(20)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)


# ------------------------------------------------------------------ the clients
class RawClient:
    """A minimal HTTP/1.1 keep-alive client on asyncio streams: a POST, then the response's
    headers and Content-Length bytes.  The load generator shares the machine with the server,
    so its own cost must be small (httpx's, ``--client httpx``, is several times this)."""

    def __init__(self, url: str):
        self.host, self.port = url.removeprefix("http://").split(":")

    async def __aenter__(self):
        self.reader, self.writer = await asyncio.open_connection(self.host, int(self.port))
        return self

    async def __aexit__(self, *exc):
        self.writer.close()

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        self.writer.write(b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (path.encode(), self.host.encode(), len(body), body))
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line[:15].lower() == b"content-length:")
        return status, await self.reader.readexactly(length)


class HttpxClient:
    def __init__(self, url: str):
        import httpx

        self.http = httpx.AsyncClient(base_url=url, timeout=30)

    async def __aenter__(self):
        await self.http.get("/health")  # the connection opened before the clock starts
        return self

    async def __aexit__(self, *exc):
        await self.http.aclose()

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        got = await self.http.post(path, content=body, headers={"content-type": "application/json"})
        return got.status_code, got.content


CLIENTS = {"raw": RawClient, "httpx": HttpxClient}


async def _client(kind: str, url: str, bodies: list[bytes], latencies: list[float], start: asyncio.Event,
                  answers=None):
    async with CLIENTS[kind](url) as http:
        await start.wait()
        for body in bodies:
            t0 = time.perf_counter()
            status, text = await http.post("/predict", body)
            latencies.append(time.perf_counter() - t0)
            if status != 200:
                raise RuntimeError(f"{url}: {status} {text[:200]!r}")
            if answers is not None:
                answers.append(json.loads(text))


async def _load(kind: str, url: str, clients: int, requests: int, bodies: list[bytes]) -> dict:
    latencies: list[float] = []
    start = asyncio.Event()
    tasks = [asyncio.create_task(_client(kind, url, [bodies[(c * requests + r) % len(bodies)] for r in range(requests)],
                                         latencies, start)) for c in range(clients)]
    await asyncio.sleep(0.2)  # every client connected
    t0 = time.perf_counter()
    start.set()
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    lat = sorted(latencies)
    return {"clients": clients, "requests": len(lat), "rps": len(lat) / wall,
            "p50_ms": 1e3 * lat[len(lat) // 2], "p99_ms": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))]}


async def _answers(url: str, bodies: list[bytes]) -> tuple[np.ndarray, np.ndarray | None]:
    """Each body's prediction, and what it asked for beside it (None: nothing)."""
    answers: list = []
    await _client("httpx", url, bodies, [], _set_event(), answers)
    beside = [next((a[key] for key in ("contributions", "leaves") if key in a), None) for a in answers]
    return (np.array([a["predictions"][0] for a in answers], dtype=np.float64),
            None if beside[0] is None else np.array([b[0] for b in beside], dtype=np.float64))


def request_bodies(model: str, body: str, n: int = 4096, seed: int = 5, explain: str | None = None) -> list[bytes]:
    """``n`` one-row request bodies for ``model``: ``data``, rows of numbers in the model's order
    (normal values, 5% missing; a categorical feature's value a float, mostly no category, as a
    code); ``records``, one record by feature name, as a service sends it (numbers alike, missing
    as null; a categorical feature one of the model's labels, drawn at random).  ``explain``:
    each body also asks for that output (``"pred_contribs": true``)."""
    import silvanforge as sf

    forest = sf.load_model(model)
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(n, forest.input_features))
    rows[rng.random(rows.shape) < 0.05] = np.nan
    flag = {explain: True} if explain else {}
    if body == "data":
        return [json.dumps({"data": [row.tolist()], **flag}).encode() for row in rows]
    names = forest.feature_names
    if not names:
        raise SystemExit(f"--body records: {model} has no feature names for records to give")
    labels = {i: list(c) for i, c in (forest.feature_categories or {}).items()}
    records = []
    for row in rows:
        record = {}
        for i, name in enumerate(names):
            if i in labels:
                record[name] = labels[i][int(rng.integers(len(labels[i])))]
            else:
                record[name] = None if row[i] != row[i] else float(row[i])
        records.append(json.dumps({**record, **flag}, default=lambda v: v.item()).encode())
    return records


def _set_event() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


def _health(url: str) -> dict:
    import httpx

    return httpx.get(f"{url}/health", timeout=10).json()


# ------------------------------------------------------------------ main
def run(model: str, clients: list[int], requests: int, window_us: float, threads: int,
        client: str = "raw", repeat: int = 3, floor: bool = False, body: str = "data", workers: int = 1,
        explain: str | None = None) -> list[dict]:
    """Both servers up at once; for each client count, ``repeat`` rounds alternating which server
    goes first; each server's best round (by requests/s) counts, as ``forge bench`` keeps its
    best: the machine is shared, and what else runs on it only ever slows a round down.
    ``floor``: a third server answering a constant body (:func:`_serve_constant`) measured alike."""
    kinds = SERVERS + (("floor",) if floor else ())
    bodies = request_bodies(model, body, explain=explain)
    servers = {}
    try:
        for kind in kinds:
            servers[kind] = Server(kind, model, window_us, threads, workers)
        answers = {kind: asyncio.run(_answers(s.url, bodies[:64])) for kind, s in servers.items() if kind != "floor"}
        (ours, our_more), (theirs, their_more) = answers["silvanforge"], answers["library"]
        # (exact for XGBoost's values; LightGBM's float64 sigmoid may differ by an ulp: README)
        if not np.allclose(ours, theirs, rtol=1e-12, atol=1e-15) or (model.endswith(".json") and
                                                                     not np.array_equal(ours, theirs)):
            raise SystemExit("the two servers answer differently: not timed")
        # (contributions: XGBoost sums them in float32, and its order of the sums is its own)
        if explain and not np.allclose(our_more, their_more, rtol=1e-4, atol=1e-5):
            raise SystemExit(f"the two servers' {explain} differ: not timed")
        for s in servers.values():
            asyncio.run(_load(client, s.url, 8, 50, bodies))  # warm-up
        results = []
        for c in clients:
            best: dict[str, dict] = {}
            for round_ in range(repeat):
                for kind in (kinds if round_ % 2 == 0 else kinds[::-1]):
                    url = servers[kind].url
                    before = _health(url) if kind != "floor" else None
                    result = asyncio.run(_load(client, url, c, requests, bodies))
                    after = _health(url) if kind != "floor" else None
                    calls = after["predict_calls"] - before["predict_calls"] if after else 1
                    result.update(server=kind, rows_per_call=(after["requests"] - before["requests"]) / max(calls, 1)
                                  if after else 1.0)
                    print(f"{kind:12s} {c:3d} clients: {result['rps']:8.0f} req/s  p50 {result['p50_ms']:.2f} ms  "
                          f"p99 {result['p99_ms']:.2f} ms  ({result['rows_per_call']:.1f} requests a predict call)",
                          file=sys.stderr)
                    if kind not in best or result["rps"] > best[kind]["rps"]:
                        best[kind] = result
            results += best.values()
        return results
    finally:
        for s in servers.values():
            s.stop()


def markdown(results: list[dict]) -> str:
    by = {(r["server"], r["clients"]): r for r in results}
    lines = ["| clients | ours: requests/s | p50 ms | p99 ms | requests a call | library-backed: requests/s | "
             "p50 ms | p99 ms | requests a call | throughput ratio |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in sorted({r["clients"] for r in results}):
        o, x = by[("silvanforge", c)], by[("library", c)]
        lines.append(f"| {c} | {o['rps']:,.0f} | {o['p50_ms']:.2f} | {o['p99_ms']:.2f} | {o['rows_per_call']:.1f} "
                     f"| {x['rps']:,.0f} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} | {x['rows_per_call']:.1f} "
                     f"| {o['rps'] / x['rps']:.2f}x |")
    floors = sorted((r for r in results if r["server"] == "floor"), key=lambda r: r["clients"])
    if floors:
        lines += ["", "| clients | a constant answer (no JSON, no model): requests/s | p50 ms | p99 ms |",
                  "|---:|---:|---:|---:|"]
        lines += [f"| {r['clients']} | {r['rps']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} |" for r in floors]
    return "\n".join(lines) + "\n"


def plot(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    for kind, label in (("silvanforge", "ours"), ("library", "the library's predict")):
        rs = sorted((r for r in results if r["server"] == kind), key=lambda r: r["clients"])
        cs = [r["clients"] for r in rs]
        left.plot(cs, [r["rps"] for r in rs], marker="o", label=label)
        right.plot(cs, [r["p99_ms"] for r in rs], marker="o", label=label)
    for ax, title in ((left, "requests/s"), (right, "p99 latency (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({r["clients"] for r in results}), [str(c) for c in sorted({r["clients"] for r in results})])
        ax.set_xlabel("concurrent clients (one row a request)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    left.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="An XGBoost (.json, .ubj) or LightGBM (.txt) model file (default: train "
                        "XGBoost's 100 trees of depth 8 on 28 features).")
    parser.add_argument("--clients", default="1,8,64", help="Concurrent client counts, comma-separated.")
    parser.add_argument("--requests", type=int, default=200, help="Requests each client sends.")
    parser.add_argument("--window-us", type=float, default=200.0, help="The servers' batch window.")
    parser.add_argument("--threads", type=int, default=1, help="Threads each predict call uses (both servers).")
    parser.add_argument("--workers", type=int, default=1,
                        help="Server processes on the port, as forge serve --workers runs them (both servers; "
                             "requests a call are then one worker's).")
    parser.add_argument("--repeat", type=int, default=3,
                        help="Rounds for each client count and server, alternating; the best counts.")
    parser.add_argument("--client", choices=sorted(CLIENTS), default="raw",
                        help="The load generator: raw (a minimal keep-alive HTTP client) or httpx.")
    parser.add_argument("--body", choices=("data", "records"), default="data",
                        help="What a request holds: data (a row of numbers in the model's order) or records "
                             "(one record by feature name, categorical values as labels).")
    parser.add_argument("--explain", choices=("pred_contribs", "pred_leaf"),
                        help="Each request also asks for its row's SHAP contributions or leaves (both servers; "
                             "the library-backed one computes them with the library's own).")
    parser.add_argument("--floor", action="store_true",
                        help="Also measure a server answering a constant body (this machine's HTTP floor).")
    parser.add_argument("--markdown", help="Also write the table here.")
    parser.add_argument("--plot", help="Also plot requests/s and p99 latency here (matplotlib).")
    args = parser.parse_args(argv)
    clients = [int(c) for c in args.clients.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(train_model(Path(tmp)))
        results = run(model, clients, args.requests, args.window_us, args.threads, args.client, args.repeat,
                      args.floor, args.body, args.workers, args.explain)
    table = markdown(results)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
