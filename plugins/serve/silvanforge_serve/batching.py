"""Micro-batching: requests that arrive within a short window are answered by one predict call.

The server's event loop validates each request into rows (:mod:`silvanforge_serve.bodies`) and
hands them to a :class:`MicroBatcher`, which answers through a future.  One worker thread takes
the first waiting request, then gathers every request that arrives within ``window_s`` of it
(or until ``max_rows`` rows), concatenates their rows, makes one predict call (for as many rows as
the batch holds, so the compiled plan's band for that size runs) and splits the result back.
Running predict on the worker keeps the event loop free to read the next requests meanwhile; the
compiled code releases the GIL while it runs.

The waiting line is bounded: :meth:`MicroBatcher.submit` raises :class:`QueueFull` when
``max_queue`` requests wait already (the server answers 503) rather than letting the line grow.
A batch whose call fails is answered request by request, so a request whose rows the model
refuses gets its own error and never disturbs the others gathered with it.

Nothing here knows about HTTP: the tests drive it with plain arrays and a counting predict.

    >>> batcher = MicroBatcher(lambda X, margin: X.sum(axis=1), window_s=200e-6)  # doctest: +SKIP
    >>> batcher.submit(np.ones((1, 3))).result()                                 # doctest: +SKIP
    array([3.])
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

# predict(rows, output_margin) -> predictions with one entry (or row) per input row
PredictFn = Callable[[np.ndarray, bool], np.ndarray]

_STOP = object()

# The slices the worker sleeps a batch window in, taking what arrived after each (MicroBatcher._gather).
GATHER_SLICES = 4


class QueueFull(Exception):
    """``max_queue`` requests are waiting already: try again later (HTTP 503)."""


@dataclass
class _Job:
    rows: np.ndarray
    output_margin: bool
    future: Future = field(default_factory=Future)  # (an asyncio future where ``loop`` is set)
    loop: object = None  # the event loop of :meth:`MicroBatcher.submit_async`'s future


@dataclass
class BatchStats:
    """What the worker has done: requests answered, predict calls made for them (fewer calls
    than requests means requests were merged), the largest batch, requests refused as full."""
    requests: int = 0
    calls: int = 0
    largest_batch: int = 0
    refused: int = 0

    def as_dict(self) -> dict:
        return {"requests": self.requests, "predict_calls": self.calls,
                "largest_batch": self.largest_batch, "refused_queue_full": self.refused}


class MicroBatcher:
    """One worker thread answering queued requests in batches through ``predict``.

    ``predict(rows, output_margin)``: the rows of several requests concatenated (axis 0), in;
    one prediction per row (axis 0), out.  ``window_s``: how long the worker waits for more
    requests after taking the first (0: it takes only those already waiting).  ``max_queue``:
    requests that may wait; more are refused.  ``max_rows``: a batch stops growing at this many
    rows (a request larger than that is answered alone).
    """

    def __init__(self, predict: PredictFn, window_s: float = 200e-6, max_queue: int = 1024,
                 max_rows: int = 4096, name: str = "forge-serve-batcher"):
        if window_s < 0:
            raise ValueError(f"the batch window must be 0 or more seconds, got {window_s}")
        if max_queue < 1 or max_rows < 1:
            raise ValueError("max_queue and max_rows must be at least 1")
        self.predict = predict
        self.window_s = float(window_s)
        self.max_queue = int(max_queue)
        self.max_rows = int(max_rows)
        self.stats = BatchStats()
        self._queue: queue.Queue = queue.Queue(maxsize=self.max_queue)
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- the caller's side
    def submit(self, rows: np.ndarray, output_margin: bool = False) -> Future:
        """Queue ``rows`` (one request, already validated) and return the future of its
        predictions; raises :class:`QueueFull` when ``max_queue`` requests wait already."""
        return self._enqueue(_Job(rows, bool(output_margin)))

    def submit_async(self, rows: np.ndarray, output_margin: bool = False):
        """:meth:`submit` from a coroutine: an asyncio future of the running loop, answered on it.

        Why not ``asyncio.wrap_future(submit(...))``: that chains two futures and wakes the loop
        once a request; a batch's answers here reach each loop in one call, and a server
        answering thousands of requests a second spent a fifth of its time on the chaining."""
        loop = asyncio.get_running_loop()
        return self._enqueue(_Job(rows, bool(output_margin), loop.create_future(), loop))

    def _enqueue(self, job: _Job):
        if self._closed:
            raise RuntimeError("the batcher is closed")
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            self.stats.refused += 1
            raise QueueFull(f"{self.max_queue} requests are waiting already; try again later") from None
        return job.future

    def queued(self) -> int:
        """Requests waiting for the worker now."""
        return self._queue.qsize()

    def close(self, timeout: float | None = 5.0) -> None:
        """Answer what is queued, then stop the worker (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)  # blocks only while the line is full, which the worker empties
        self._thread.join(timeout)

    # ---------------------------------------------------------------- the worker
    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is _STOP:
                return
            batch, stop = self._gather(job)
            self._answer(batch)
            if stop:
                return

    def _gather(self, first: _Job) -> tuple[list[_Job], bool]:
        """``first`` and the requests arriving within the window after it (bounded by rows).

        The worker sleeps through the window in a few slices and takes what arrived at the end
        of each, rather than waiting on the line for each request: woken once a request, it
        took the GIL from the event loop 60 times a batch under load, and the server answered
        fewer requests a second."""
        batch, rows = [first], len(first.rows)
        deadline = time.perf_counter() + self.window_s
        slice_s = self.window_s / GATHER_SLICES
        while rows < self.max_rows:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                time.sleep(min(remaining, slice_s))
                continue
            if job is _STOP:
                return batch, True
            batch.append(job)
            rows += len(job.rows)
        return batch, False

    def _answer(self, batch: list[_Job]) -> None:
        stats = self.stats
        stats.requests += len(batch)
        stats.largest_batch = max(stats.largest_batch, len(batch))
        answers: list = []  # (job, result, exception)
        for margin in (False, True):  # one call for each kind of output asked for
            group = [job for job in batch if job.output_margin is margin]
            if group:
                self._call(group, margin, answers)
        _deliver(answers)

    def _call(self, group: list[_Job], margin: bool, answers: list) -> None:
        self.stats.calls += 1
        try:
            rows = group[0].rows if len(group) == 1 else np.concatenate([job.rows for job in group])
            values = self.predict(rows, margin)
            if len(values) != len(rows):
                raise RuntimeError(f"predict returned {len(values)} predictions for {len(rows)} rows")
        except Exception as exc:  # noqa: BLE001 - each request gets its own answer below
            if len(group) == 1:
                answers.append((group[0], None, exc))
            else:  # one request's rows spoil the batch: answer each alone
                for job in group:
                    self._call([job], margin, answers)
            return
        start = 0
        for job in group:
            n = len(job.rows)
            answers.append((job, values[start:start + n], None))
            start += n


def _deliver(answers: list) -> None:
    """The answers of a batch: concurrent futures at once, each event loop's in one call on it."""
    loops: dict = {}
    for job, result, exception in answers:
        if job.loop is None:
            _settle(job.future, result, exception)
        else:
            loops.setdefault(job.loop, []).append((job.future, result, exception))
    for loop, settled in loops.items():
        try:
            loop.call_soon_threadsafe(_settle_all, settled)
        except RuntimeError:  # that loop is closed: nobody waits for these answers
            pass


def _settle_all(settled: list) -> None:
    for future, result, exception in settled:
        _settle(future, result, exception)


def _settle(future, result=None, exception: BaseException | None = None) -> None:
    """Answer ``future`` (concurrent or asyncio), unless its caller went away (cancelled it) meanwhile."""
    try:
        if exception is not None:
            future.set_exception(exception)
        else:
            future.set_result(result)
    except (InvalidStateError, asyncio.InvalidStateError):
        pass
