"""The HTTP application: Starlette routes over a compiled model and a :class:`MicroBatcher`.

    POST /predict   a JSON body of rows (:mod:`silvanforge_serve.bodies`) -> {"predictions": [...]}
                    (one entry per row, shaped as ``predict`` returns: a list per row for several
                    outputs), with "contributions" or "leaves" beside them where the body asks
                    for ``pred_contribs`` or ``pred_leaf`` (``predict``'s of those, a row each);
                    400 with {"error": "..."} for a body it cannot read, 413 for a body over
                    ``max_body_bytes`` (the connection then closed), 503 when the waiting line is full
    GET  /health    {"status": "ok", "process": its pid, "queued": ..., "requests": ..., "predict_calls": ...,
                    "small_call_us": what calls of a few rows take, smoothed (at most inline_us: on the loop)}
    GET  /model     the model (features, their names, outputs, classes) and the compiled plan, as
                    ``forge show --level plan`` prints it

Every body is read and checked on the event loop, before its rows join a batch; the batch is
predicted on the batcher's thread.  :func:`listen` and :func:`make_server` run it under uvicorn.
"""

from __future__ import annotations

import contextlib
import os
import socket
import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from silvanforge.errors import InputError, UnsupportedModelError
from silvanforge.inputs.records import record_readers

from .batching import ExplainFn, MicroBatcher, PredictFn, QueueFull
from .bodies import BadRequest, parse_body, taken_keys
from .json_io import dumps as _dumps

# The largest body ``POST /predict`` reads by default (bytes): 4096 rows of 255 features as JSON
# numbers of 17 digits take about 18 MB.
MAX_BODY_BYTES = 64 << 20


def make_app(cf, *, threads: int | None = None, window_us: float = 200.0, max_queue: int = 1024,
             max_rows: int = 4096, predict: PredictFn | None = None, predict_name: str | None = None,
             explain: ExplainFn | None = None, inline_us: float = 50.0,
             max_body_bytes: int = MAX_BODY_BYTES) -> Front:
    """The application serving compiled model ``cf`` (a CompiledForest).

    ``threads``: threads each predict call uses (default: the model's, else all CPUs).
    ``window_us``: how long the batcher waits for more requests after the first (microseconds;
    the event loop's timer closes the window: :mod:`silvanforge_serve.batching`).
    ``max_queue``: requests that may wait; more get 503.  ``max_rows``: rows a batch stops at.
    ``predict(rows, output_margin)``: what answers a batch instead of ``cf.predict`` (the load
    benchmark plugs the training library's own predict in here); ``cf`` still reads the bodies.
    ``explain(rows, output)``: what answers a body's ``pred_contribs`` or ``pred_leaf``; by
    default ``cf.predict``'s, and none where ``predict`` is given without it (such bodies 400).
    The first such request builds what it needs (seconds, for a large model), unless
    :func:`prepare_outputs` built it first.
    ``inline_us``: a batch of a few rows is predicted on the event loop itself where such calls
    have taken at most this long (microseconds; 0: always on the batcher's thread;
    :mod:`silvanforge_serve.batching`).
    ``max_body_bytes``: the largest body read; a larger one is answered 413 as soon as its
    declared length or the bytes read so far pass it (a body is read whole before it is parsed).
    The batcher is ``app.state.batcher``; it stops when the application shuts down.  What it
    returns is an ASGI application (:class:`Front` over a Starlette application).
    """
    if predict is None:
        def predict(rows, output_margin, _predict=cf.predict):
            return _predict(rows, output_margin=output_margin, threads=threads)

        if explain is None:
            def explain(rows, output, _predict=cf.predict):
                return _predict(rows, threads=threads, **{output: True})
        predict_name = "silvanforge"
    if max_body_bytes < 1:  # (before the batcher's thread starts)
        raise InputError(f"the largest body must be at least 1 byte, got {max_body_bytes}")
    batcher = MicroBatcher(predict, window_s=window_us * 1e-6, max_queue=max_queue, max_rows=max_rows,
                           encode=_answer_body, explain=explain, inline_s=inline_us * 1e-6)
    forest = cf.forest
    serving = {"predict": predict_name or getattr(predict, "__name__", "custom"),
               "batch_window_us": window_us, "max_queue": max_queue, "max_batch_rows": max_rows,
               "threads": threads, "inline_us": inline_us, "max_body_bytes": max_body_bytes,
               "beside_predictions": [] if explain is None else list(ANSWER_KEYS)}
    # (described once now, though GET /model describes it afresh: the summary waits for the plan's
    # forms, so the server starts with them built, and a model it cannot describe fails here)
    _dumps({**model_info(cf), "serving": serving})

    async def health(request: Request) -> Response:
        # (the process: where several workers share a port, each answers for its own)
        small = batcher.small_call_s  # (a few rows' calls: at most inline_us, made on the event loop)
        return _json({"status": "ok", "process": os.getpid(), "queued": batcher.queued(), **batcher.stats.as_dict(),
                      "small_call_us": None if small is None else round(small * 1e6, 1)})

    async def model(request: Request) -> Response:
        # (described at each request: the plan's forms and the other outputs get built meanwhile)
        return Response(_dumps({**model_info(cf), "serving": serving}), media_type="application/json")

    @contextlib.asynccontextmanager
    async def lifespan(app):
        try:
            yield
        finally:  # (uvicorn stops on SIGINT/SIGTERM: what is queued is answered first)
            batcher.close()

    endpoint = PredictEndpoint(forest, batcher, max_body_bytes)
    app = Starlette(routes=[Route("/predict", endpoint, methods=["POST"]),
                            Route("/health", health, methods=["GET"]),
                            Route("/model", model, methods=["GET"])],
                    lifespan=lifespan)
    app.state.batcher = batcher
    return Front(app, endpoint)


class Front:
    """The served application: ``POST /predict`` handed to its endpoint at once, everything else
    (the other routes, a wrong method's 405, lifespan) to the Starlette application.  Why: a
    request through Starlette's middleware and router cost 7 us more of the 40 a one-row request
    costs the server.  ``state`` and ``routes`` are the Starlette application's."""

    def __init__(self, app: Starlette, predict: PredictEndpoint):
        self.app, self.predict = app, predict
        self.state, self.routes = app.state, app.routes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/predict":
            await self.predict(scope, receive, send)
        else:
            await self.app(scope, receive, send)


class PredictEndpoint:
    """``POST /predict`` as a plain ASGI application, which Starlette routes to: the body read
    from the messages, checked (:func:`silvanforge_serve.bodies.parse_body`), its rows handed to
    the batcher, the answer sent as two messages.  Why not a Starlette endpoint: its Request and
    Response around each request, and the futures chained to await the batcher's, were a third
    of what a one-row request cost the server (72 us in all, in process)."""

    def __init__(self, forest, batcher: MicroBatcher, max_body_bytes: int = MAX_BODY_BYTES):
        self.forest, self.batcher, self.max_body_bytes = forest, batcher, max_body_bytes
        # (how records are read, and which of a body's keys are features: made once, not a request)
        self.readers, self.taken = record_readers(forest), taken_keys(forest)

    async def __call__(self, scope, receive, send) -> None:
        # (one coroutine a request, the common case inline: each await of another coroutine and
        # each frame cost the event loop, which every request waits for)
        limit = self.max_body_bytes
        if _declared_length(scope) > limit:  # (refused before any of it is read, or a 100 Continue sent)
            await _send(send, *_too_large(limit))
            return
        message = await receive()
        body = message.get("body", b"")
        if message.get("more_body", False) or message["type"] != "http.request":  # (a body in several messages)
            body = await _body(receive, message, limit)
            if body is None:  # the client went away
                return
            if body is TOO_LARGE:
                await _send(send, *_too_large(limit))
                return
        elif len(body) > limit:
            await _send(send, *_too_large(limit))
            return
        got = self.submit(body)
        if type(got) is tuple:
            status, payload, headers = got
        else:
            status, headers = 200, ()
            try:
                payload = await got  # (:func:`_answer_body`, made by the batcher's thread)
            except (InputError, UnsupportedModelError) as exc:  # what only the model's own checks find
                status, payload, headers = _error_body(400, exc)
            except Exception as exc:  # noqa: BLE001 - a bug in predict: answered, the server stays up
                status, payload, headers = _error_body(500, f"{type(exc).__name__}: {exc}")
        await _send(send, status, payload, headers)

    def submit(self, body: bytes):
        """A request of ``body`` read and handed to the batcher: the future of its answer's JSON,
        or (status, JSON body, extra headers) of an answer made at once (an error, no rows)."""
        try:
            rows, margin, explained = parse_body(body, self.forest, self.readers, lists=True, taken=self.taken)
        except BadRequest as exc:
            return _error_body(400, exc)
        except Exception as exc:  # noqa: BLE001 - a bug in reading it: answered, the server stays up
            return _error_body(500, f"{type(exc).__name__}: {exc}")
        if explained is not None and self.batcher.explain is None:
            return _error_body(400, f"this server answers predictions only, not {explained}")
        if len(rows) == 0 and explained is None:  # (no rows asking for more: the batcher's, which may refuse it)
            return 200, b'{"predictions":[]}', []
        try:
            return self.batcher.submit_async(rows, margin, explained)
        except QueueFull as exc:
            return _error_body(503, exc, [(b"retry-after", b"1")])


async def _send(send, status: int, payload: bytes, headers) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload)),
                            *headers]})
    await send({"type": "http.response.body", "body": payload})


TOO_LARGE = object()  # (what _body answers for a body over its limit)


async def _body(receive, message: dict, limit: int):
    """A request's whole body from its ASGI messages (``message`` the first); None where the
    client disconnected, TOO_LARGE where the bytes pass ``limit`` (what came so far dropped)."""
    chunks, size = [], 0
    while True:
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return TOO_LARGE
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        message = await receive()


def _declared_length(scope) -> int:
    """The Content-Length a request declares (0 where it declares none, or not a number)."""
    for key, value in scope.get("headers", ()):
        if key == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


def _too_large(limit: int) -> tuple[int, bytes, list]:
    """The 413 of a body over ``limit`` bytes; the connection closed after it (the rest of the
    body is not read)."""
    return _error_body(413, f"the body is larger than {limit} bytes, the most this server reads "
                            "(forge serve --max-body-mb); send its rows in several requests",
                       [(b"connection", b"close")])


def model_info(cf) -> dict:
    """What ``GET /model`` says: the model, its features and outputs, and the compiled plan."""
    f = cf.forest
    classes = f.class_labels
    return {
        "model": f"{f.source} {f.objective}".strip(), "trees": f.num_trees, "max_depth": f.max_depth(),
        "features": cf.num_features, "feature_names": list(f.feature_names) if f.feature_names else None,
        "categorical_features": _categorical(f),
        "outputs": f.num_outputs, "classes": np.asarray(classes).tolist() if classes is not None else None,
        "target": cf.target, "rep": cf.rep, "plan": cf.plan_text(), "summary": cf.summary(),
    }


def _categorical(forest) -> dict | None:
    """Each categorical feature (its position, as text) and its labels; null for a feature whose
    categories the model knows by hash (CatBoost's: any label is read), None where there are none."""
    found = {str(k): list(v) for k, v in (forest.feature_categories or {}).items()}
    for k in sorted(forest.hashed_categories or {}):
        found.setdefault(str(k), None)
    return found or None


# ------------------------------------------------------------------ running under uvicorn
BACKLOG = 2048  # uvicorn's default
def listen(host: str = "127.0.0.1", port: int = 8080, reuse_port: bool = False) -> socket.socket:
    """A socket bound to ``host``:``port`` (0: a free port; ``sock.getsockname()`` tells which),
    for :func:`make_server`; an address in use is an :class:`InputError` naming it.
    ``reuse_port``: bound with SO_REUSEPORT, so that other such sockets may bind the same address
    and the kernel shares the connections out among them (Linux: by a hash of each connection)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(BACKLOG)  # connections wait from now on, while the server starts
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def make_server(app, log_level: str = "warning", **config):
    """A uvicorn server for ``app``; ``server.run(sockets=[listen(...)])`` serves until
    SIGINT/SIGTERM (in the main thread) or ``server.should_exit = True``.

    What exists now (the compiled model, its IR and plan, the libraries) is moved out of the
    garbage collector's sight (``gc.freeze``): a full collection would otherwise walk all of it,
    tens of milliseconds in which the event loop answers nothing (measured under load, that was
    the slowest 1% of requests)."""
    import gc

    import uvicorn

    gc.collect()
    gc.freeze()

    # (No proxy headers: the application reads no client address, and their middleware around
    # it was 5% of the event loop's time under load; ``proxy_headers=True`` behind a proxy that
    # terminates TLS, where a redirect's scheme should be the client's.  No server header, which
    # says nothing a client needs)
    config = uvicorn.Config(app, **{"log_level": log_level, "access_log": False, "lifespan": "on",
                                    "proxy_headers": False, "server_header": False, **config})
    return uvicorn.Server(config)


# ------------------------------------------------------------------ responses
def _json(doc, status: int = 200, headers: dict | None = None) -> Response:
    return Response(_dumps(doc), status_code=status, headers=headers, media_type="application/json")


# The answer's key of each output a body may ask for beside its predictions.
ANSWER_KEYS = {"pred_contribs": "contributions", "pred_leaf": "leaves"}


def _answer_body(values: list, explained: str | None = None, beside: list | None = None) -> bytes:
    """The JSON answer of a request's predictions (a list, an entry a row), and of the output
    ``explained`` asked for beside them (``beside``, an entry a row)."""
    if explained is None:
        return _dumps({"predictions": values})
    return _dumps({"predictions": values, ANSWER_KEYS[explained]: beside})


def prepare_outputs(cf, outputs) -> None:
    """Build what answering ``outputs`` (names of :data:`ANSWER_KEYS`) needs now, before serving,
    rather than at the first request that asks (which would wait for it, and the requests
    behind it too): the contributions' tables and kernel, the leaves' compiled model.  An
    unknown name, or a model that has no such output, is an InputError."""
    for output in outputs:
        if output not in ANSWER_KEYS:
            raise InputError(f"cannot prepare {output!r}: the outputs served beside predictions are "
                             f"{', '.join(ANSWER_KEYS)}")
        try:
            if output == "pred_contribs":
                cf.prepare_contributions()
            else:
                cf.output_model(output).wait()
        except UnsupportedModelError as exc:
            raise InputError(f"cannot serve {output}: {exc}") from None


def _error_body(status: int, message, headers: list | None = None) -> tuple[int, bytes, list]:
    """(status, body, headers) of an error: its message on one line."""
    return status, _dumps({"error": " ".join(str(message).split())}), headers or []

