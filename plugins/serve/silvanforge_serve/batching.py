"""Micro-batching: requests that arrive within a short window are answered by one predict call.

The server's event loop validates each request into rows (:mod:`silvanforge_serve.bodies`) and
hands them to a :class:`MicroBatcher`, which answers through a future.  Requests that arrive
within ``window_s`` of the first (or until ``max_rows`` rows) are gathered, their rows
concatenated, one predict call made (for as many rows as the batch holds, so the compiled plan's
band for that size runs) and the result split back.  A coroutine's requests
(:meth:`MicroBatcher.submit_async`) are gathered on its event loop, a timer closing the window,
and reach the worker thread as one batch: the worker wakes once a batch, not once a request
(woken at each request, it took the GIL from the event loop that many times: a server of 64
clients answered 24-25 thousand requests a second so, 27 thousand gathering on the loop).
Requests from threads (:meth:`MicroBatcher.submit`) are gathered by the worker itself.  While
the worker predicts, the event loop reads the next requests and gathers the next batch; the
compiled code releases the GIL while it runs.

A loop's batch of a few rows whose calls have been cheap (``inline_s``: the small calls' time,
measured on every call) is answered on the loop itself, at its window's close: handing it to the
worker and its answers back cost two wake-ups of a sleeping thread (0.15 ms a request to a lone
client on a 2-vCPU VM, where the call of a one-row walk costs 8 us), and an event loop that
predicts a few microseconds holds its other requests up no longer than that.

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
# explain(rows, output) -> that output ("pred_contribs", "pred_leaf") with one entry a row
ExplainFn = Callable[[np.ndarray, str], np.ndarray]

_STOP = object()

# How long a closed batcher's worker waits for requests counted before the close that have not
# reached it yet (a loop's window handed over on the loop's own thread).
CLOSE_WAIT_S = 1.0

# A loop's batch of up to INLINE_ROWS rows is answered on the loop where calls of that many rows
# have taken at most ``inline_s`` (MicroBatcher): their time, smoothed over calls (a new call's
# weight INLINE_WEIGHT), measured on whichever thread made them.
INLINE_ROWS = 8
INLINE_WEIGHT = 0.2


class QueueFull(Exception):
    """``max_queue`` requests are waiting already: try again later (HTTP 503)."""


@dataclass(slots=True)
class _Job:
    rows: np.ndarray | list  # (a list of rows: made float64 with the batch's, :func:`_rows_of`)
    output_margin: bool
    future: Future = field(default_factory=Future)  # (an asyncio future where ``loop`` is set)
    loop: object = None  # the event loop of :meth:`MicroBatcher.submit_async`'s future
    explained: str | None = None  # an output asked for beside the predictions (``explain``'s)


@dataclass
class BatchStats:
    """What the batcher has done: requests taken to be answered (a batch counted as its call
    starts), predict calls made for them (fewer calls than requests means requests were
    merged), the largest batch, requests refused as full."""
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
    one prediction per row (axis 0), out.  A request's rows are an array, or a list of rows
    (lists of floats and None, missing), which the worker makes float64 with the batch's.
    ``window_s``: how long a batch waits for more requests after its first (0: it takes only
    those already waiting; on an event loop, those the loop reads before its next turn).
    ``max_queue``: requests that may wait; more are refused.  ``max_rows``: a batch stops
    growing at this many rows (a request larger than that is answered alone).  ``encode``:
    what a request's predictions (as Python values: a list, an entry a row) are answered as,
    made on the worker thread; without it, the answer is the predictions' own slice.
    ``explain(rows, output)``: another output for each row (``"pred_contribs"``,
    ``"pred_leaf"``), asked for by a request beside its predictions; answered as
    ``encode(predictions, output, values)`` (without ``encode``, the pair of slices).
    ``inline_s``: a loop's batch of up to :data:`INLINE_ROWS` rows asking for predictions alone
    is predicted on the loop itself where such calls have taken at most this long (seconds,
    smoothed; 0: never), the worker measuring the first ones; so ``predict`` may run on a loop's
    thread and the worker's at once (the compiled model's does: its staging is a thread's).

    Why rows as lists and answers encoded here: on a server's event loop, turning one request's
    row into an array and its answer into JSON were a tenth of the loop's time under load, and
    the loop is what every request waits for; the worker, between its calls, is idle.
    """

    def __init__(self, predict: PredictFn, window_s: float = 200e-6, max_queue: int = 1024,
                 max_rows: int = 4096, name: str = "forge-serve-batcher",
                 encode: Callable[..., object] | None = None, explain: ExplainFn | None = None,
                 inline_s: float = 50e-6):
        if window_s < 0:
            raise ValueError(f"the batch window must be 0 or more seconds, got {window_s}")
        if max_queue < 1 or max_rows < 1:
            raise ValueError("max_queue and max_rows must be at least 1")
        self.predict, self.encode, self.explain = predict, encode, explain
        self.window_s = float(window_s)
        self.inline_s = float(inline_s)
        self.small_call_s: float | None = None  # (calls of up to INLINE_ROWS rows: their smoothed time)
        self.max_queue = int(max_queue)
        self.max_rows = int(max_rows)
        self.stats = BatchStats()
        # (the worker's line: a thread's job, or a loop's batch of them as a list; unbounded,
        # requests are counted against max_queue until the worker takes them)
        self._queue: queue.Queue = queue.Queue()
        self._waiting = 0
        self._count = threading.Lock()
        self._gathering: dict = {}  # event loop -> (its jobs, their rows, the timer closing the window)
        self._carried = None  # (a loop's batch the last batch had no room for: the next one's first)
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- the caller's side
    def submit(self, rows: np.ndarray | list, output_margin: bool = False, explained: str | None = None) -> Future:
        """Queue ``rows`` (one request, already validated) and return the future of its
        predictions (and ``explained``, an output of ``explain``'s, beside them); raises
        :class:`QueueFull` when ``max_queue`` requests wait already."""
        self._check_explained(explained)
        self._admit()
        job = _Job(rows, bool(output_margin), explained=explained)
        self._queue.put(job)
        return job.future

    def submit_async(self, rows: np.ndarray | list, output_margin: bool = False, explained: str | None = None):
        """:meth:`submit` from a coroutine: an asyncio future of the running loop, answered on it;
        the request gathered on that loop with the others of its window (call it on the loop).

        Why not ``asyncio.wrap_future(submit(...))``: that chains two futures and wakes the loop
        once a request; a batch's answers here reach each loop in one call, and a server
        answering thousands of requests a second spent a fifth of its time on the chaining."""
        loop = asyncio.get_running_loop()
        if explained is not None:
            self._check_explained(explained)
        self._admit(loop)
        job = _Job(rows, bool(output_margin), loop.create_future(), loop, explained)
        gathering = self._gathering.get(loop)
        if gathering is None:  # the first of a window: the loop's timer closes it
            # (uvloop's timers count whole milliseconds: a window under half of one closes at the
            # loop's next turn, once it has read every request that arrived meanwhile.  Kept to
            # the microsecond by looking again each turn, a server of 64 clients answered 24
            # thousand requests a second against 27: the turns, not the clock, gather best.)
            timer = loop.call_later(self.window_s, self._close_window, loop) if self.window_s > 0 else \
                loop.call_soon(self._close_window, loop)
            gathering = self._gathering[loop] = [[], 0, timer]
        gathering[0].append(job)
        gathering[1] += len(rows)
        if gathering[1] >= self.max_rows:  # as many rows as a batch holds: to the worker now
            gathering[2].cancel()
            self._close_window(loop)
        return job.future

    def _check_explained(self, explained: str | None) -> None:
        if explained is not None and self.explain is None:
            raise ValueError(f"this batcher answers predictions only, not {explained}")

    def _admit(self, loop=None) -> None:
        """A request counted as waiting, or :class:`QueueFull` where ``max_queue`` wait already
        (and RuntimeError once closed: decided with the count, so that a request is either
        refused or counted before :meth:`close` and answered by the worker's last rounds).
        Windows of loops closed before their timer ran go to the worker first: their requests
        would otherwise hold their places in the line until :meth:`close`."""
        if self._gathering and (len(self._gathering) > 1 or loop not in self._gathering):
            for other in [other for other in list(self._gathering) if other is not loop and other.is_closed()]:
                self._close_window(other)
        with self._count:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            if self._waiting >= self.max_queue:
                self.stats.refused += 1
                raise QueueFull(f"{self.max_queue} request{'s are' if self.max_queue > 1 else ' is'} waiting already; "
                                "try again later")
            self._waiting += 1

    def _close_window(self, loop) -> None:
        """The requests ``loop`` gathered, to the worker as one batch (or answered here, on the
        loop, where they are a few rows of predictions whose calls have been cheap)."""
        gathering = self._gathering.pop(loop, None)
        if gathering is None:
            return
        jobs, rows = gathering[0], gathering[1]
        small = self.small_call_s
        if small is not None and rows <= INLINE_ROWS and 0 < self.inline_s and small <= self.inline_s \
                and not self._closed \
                and all(job.explained is None for job in jobs) and loop is _running_loop():
            self._taken(jobs)
            answers: list = []
            self._answer_into(jobs, answers)
            for job, result, exception in answers:
                _settle(job.future, result, exception)
            return
        self._queue.put(jobs)

    def queued(self) -> int:
        """Requests waiting for the worker now."""
        return self._waiting

    def close(self, timeout: float | None = 5.0) -> None:
        """Answer what is queued and what loops are gathering, then stop the worker (idempotent)."""
        with self._count:
            if self._closed:
                return
            self._closed = True
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        for loop in list(self._gathering):
            if loop is current or loop.is_closed():
                gathering = self._gathering.get(loop)
                if gathering is not None and loop is current:
                    gathering[2].cancel()
                self._close_window(loop)
            else:  # (another thread's loop: its window handed over on it, whose timer is its own)
                try:
                    loop.call_soon_threadsafe(self._close_window, loop)
                except RuntimeError:  # (closed meanwhile)
                    self._close_window(loop)
        self._queue.put(_STOP)
        self._thread.join(timeout)

    # ---------------------------------------------------------------- the worker
    def _work(self) -> None:
        while True:
            item, self._carried = (self._carried, None) if self._carried is not None else (self._queue.get(), None)
            if item is _STOP:
                break
            batch, stop = self._gather(item)
            self._answer(batch)
            if stop:
                break
        # Closed: what was counted before the close and reaches the line after it (a thread's
        # request put behind the stop, a loop's window handed over on its own thread) is answered
        # too, for as long as it takes to arrive (a loop that stopped may never hand it over).
        deadline = time.perf_counter() + CLOSE_WAIT_S
        while self._waiting > 0 or self._carried is not None:
            if self._carried is not None:
                item, self._carried = self._carried, None
            else:
                try:
                    item = self._queue.get(timeout=max(deadline - time.perf_counter(), 0.0))
                except queue.Empty:
                    return
                if item is _STOP:
                    continue
            batch, _ = self._gather(item)
            self._answer(batch)

    def _gather(self, first) -> tuple[list[_Job], bool]:
        """``first`` (a thread's request, or a loop's batch) and what joins it: a thread's request
        waits the window for others; a loop's batch waited its own, and takes only what is
        queued already.  Bounded by rows: a loop's batch without room is the next batch's."""
        batch = list(first) if type(first) is list else [first]
        rows = sum(len(job.rows) for job in batch)
        deadline = time.perf_counter() + (0.0 if type(first) is list else self.window_s)
        stop = False
        while rows < self.max_rows:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                try:
                    item = self._queue.get(timeout=remaining)
                except queue.Empty:
                    break
            if item is _STOP:
                stop = True
                break
            jobs = item if type(item) is list else [item]
            more = sum(len(job.rows) for job in jobs)
            if type(item) is list and rows + more > self.max_rows:
                self._carried = item
                break
            batch.extend(jobs)
            rows += more
        self._taken(batch)
        return batch, stop

    def _taken(self, batch: list[_Job]) -> None:
        """A batch taken to be answered: no longer waiting, counted.  (Under the lock: the loop's
        thread answers a few rows itself while the worker answers others.)"""
        with self._count:
            self._waiting -= len(batch)
            self.stats.requests += len(batch)
            self.stats.largest_batch = max(self.stats.largest_batch, len(batch))

    def _answer(self, batch: list[_Job]) -> None:
        answers: list = []  # (job, result, exception)
        self._answer_into(batch, answers)
        _deliver(answers)

    def _answer_into(self, batch: list[_Job], answers: list) -> None:
        # One predict call for each kind of prediction asked for (values, margins), and one call
        # of each other output for every request asking for it, whichever kind it asked beside
        # (contributions are the margin's either way: computed once, not once a kind).
        if all(job.output_margin is False and job.explained is None for job in batch):
            self._call(batch, False, answers)
            return
        outputs: dict = {}
        for job in batch:
            if job.explained is not None:
                outputs.setdefault(job.explained, []).append(job)
        beside: dict = {}  # id(job) -> its rows' other output
        for output, group in outputs.items():
            self._explain(group, output, beside, answers)
        refused = {id(job) for job, _, exc in answers if exc is not None}
        groups: dict = {}
        for job in batch:
            if id(job) not in refused:
                groups.setdefault(job.output_margin, []).append(job)
        for margin, group in groups.items():
            self._call(group, margin, answers, beside)

    def _explain(self, group: list[_Job], output: str, beside: dict, answers: list) -> None:
        """``output`` of the rows of ``group`` into ``beside`` (a request's slice by its id); a
        request whose rows it refuses is answered its error."""
        with self._count:
            self.stats.calls += 1
        try:
            rows = _rows_of(group)
            more = self.explain(rows, output)
            if len(more) != len(rows):
                raise RuntimeError(f"explain returned {len(more)} values of {output} for {len(rows)} rows")
            if self.encode is not None:  # (once a batch: each request's a slice of it)
                more = np.asarray(more).tolist()
        except Exception as exc:  # noqa: BLE001 - each request gets its own answer
            if len(group) == 1:
                answers.append((group[0], None, exc))
            else:  # one request's rows spoil the batch: each alone
                for job in group:
                    self._explain([job], output, beside, answers)
            return
        start = 0
        for job in group:
            beside[id(job)] = more[start:start + len(job.rows)]
            start += len(job.rows)

    def _call(self, group: list[_Job], margin: bool, answers: list, beside: dict | None = None) -> None:
        """The predictions of ``group``'s rows, each request answered its own (with its other
        output from ``beside``, where it asked for one)."""
        with self._count:
            self.stats.calls += 1
        try:
            rows = _rows_of(group)
            start = time.perf_counter()
            values = self.predict(rows, margin)
            if len(rows) <= INLINE_ROWS:  # (what a small call costs: whether the next is made on the loop)
                took, small = time.perf_counter() - start, self.small_call_s
                self.small_call_s = took if small is None else small + INLINE_WEIGHT * (took - small)
            if len(values) != len(rows):
                raise RuntimeError(f"predict returned {len(values)} predictions for {len(rows)} rows")
            if self.encode is not None:  # (once a batch: each request's a slice of it)
                values = np.asarray(values).tolist()
        except Exception as exc:  # noqa: BLE001 - each request gets its own answer below
            if len(group) == 1:
                answers.append((group[0], None, exc))
            else:  # one request's rows spoil the batch: answer each alone
                for job in group:
                    self._call([job], margin, answers, beside)
            return
        start, encode = 0, self.encode
        for job in group:
            n = len(job.rows)
            result = values[start:start + n]
            start += n
            more = None if job.explained is None else beside[id(job)]
            if encode is None:
                answers.append((job, result if more is None else (result, more), None))
                continue
            try:
                answers.append((job, encode(result) if more is None else encode(result, job.explained, more), None))
            except Exception as exc:  # noqa: BLE001 - that request's own answer
                answers.append((job, None, exc))


def _running_loop():
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _rows_of(group: list[_Job]) -> np.ndarray:
    """The rows of a group of requests, one array (rows given as lists made float64 at once)."""
    if len(group) == 1 and type(group[0].rows) is not list:
        return group[0].rows
    if all(type(job.rows) is list for job in group):
        return np.array([row for job in group for row in job.rows], dtype=np.float64)
    return np.concatenate([np.array(job.rows, dtype=np.float64) if type(job.rows) is list else job.rows
                           for job in group])


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
