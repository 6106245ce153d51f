"""The micro-batcher of ``forge serve`` (plugins/serve, ``silvanforge_serve.batching``) alone, no
network: requests within the window answered by one predict call and split back, a coroutine's
requests gathered on its event loop, batches bounded by rows and the waiting line by
``max_queue``, windows of ended loops and a close from another thread answered, a failing
request failing alone, rows given as lists and answers encoded on the worker.

Every request loop here is bounded."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

import silvanforge as sf
from silvanforge_serve.batching import MicroBatcher, QueueFull


def test_the_batcher_merges_requests_arriving_within_the_window_and_splits_the_answers():
    calls = []

    def predict(rows, margin):
        calls.append(len(rows))
        return rows.sum(axis=1) + (100 if margin else 0)

    batcher = MicroBatcher(predict, window_s=0.05)
    try:
        futures = [batcher.submit(np.full((k % 3 + 1, 2), float(k)), output_margin=k == 4) for k in range(8)]
        answers = [f.result(timeout=10) for f in futures]
    finally:
        batcher.close()
    for k, got in enumerate(answers):
        assert got.tolist() == [2.0 * k + (100 if k == 4 else 0)] * (k % 3 + 1)
    # one call for the plain outputs and one for the margins asked for, not one a request
    assert batcher.stats.requests == 8 and batcher.stats.calls == len(calls) < 8
    assert sum(calls) == sum(k % 3 + 1 for k in range(8))


def test_coroutines_get_their_answers_on_their_loop_one_wake_a_batch():
    """submit_async: asyncio futures of the running loop, a batch's answers (values and a
    request's own error) set there in one call; a request cancelled meanwhile is skipped."""
    import asyncio

    def predict(rows, margin):
        if np.isinf(rows).any():
            raise sf.InputError("rows hold infinity")
        return rows[:, 0] * 2 + (100 if margin else 0)

    batcher = MicroBatcher(predict, window_s=0.05)
    woken = []

    async def main():
        loop = asyncio.get_running_loop()
        plain = loop.call_soon_threadsafe

        def counted(*args):
            woken.append(args[0].__name__)
            return plain(*args)
        loop.call_soon_threadsafe = counted
        futures = [batcher.submit_async(np.array([[np.inf if k == 2 else float(k)]]), output_margin=k == 5)
                   for k in range(7)]
        futures[4].cancel()
        return await asyncio.gather(*futures, return_exceptions=True)
    try:
        answers = asyncio.run(main())
    finally:
        batcher.close()
    for k, got in enumerate(answers):
        if k == 2:
            assert isinstance(got, sf.InputError)
        elif k == 4:
            assert isinstance(got, asyncio.CancelledError)
        else:
            assert got.tolist() == [2.0 * k + (100 if k == 5 else 0)]
    assert woken == ["_settle_all"]  # (the seven in one window: one batch, one wake)


def test_a_loops_requests_reach_the_worker_as_batches_bounded_by_rows():
    """submit_async gathers on the loop: a window is one batch (one predict call a kind of
    output), a window that reaches max_rows goes at once, a batch the worker has no room for is
    the next call's first, and what waits is counted (``queued``) and bounded (``max_queue``)."""
    import asyncio

    calls, entered, release = [], threading.Event(), threading.Event()

    def predict(rows, margin):
        calls.append(len(rows))
        if rows[0, 0] == -1:  # (the first call holds the worker while the others gather)
            entered.set()
            release.wait(10)
        return rows[:, 0] * 2

    batcher = MicroBatcher(predict, window_s=0.05, max_rows=5, max_queue=9)

    async def main():
        first = batcher.submit_async(np.array([[-1.0]]))
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
        # 3 + 3 rows: the second request fills the window's 5 rows, which goes at once
        a = [batcher.submit_async(np.full((3, 1), float(k))) for k in (1, 2)]
        b = [batcher.submit_async(np.full((1, 1), float(k))) for k in range(3, 9)]
        assert batcher.queued() == 8
        with pytest.raises(QueueFull):  # (9 waiting with the first, which the worker took)
            [batcher.submit_async(np.ones((1, 1))) for _ in range(2)]
        release.set()
        return await asyncio.gather(first, *a, *b)
    try:
        answers = asyncio.run(main())
    finally:
        release.set()
        batcher.close()
    assert [got.tolist() for got in answers] == [[-2.0], [2.0] * 3, [4.0] * 3] + [[2.0 * k] for k in range(3, 9)]
    assert calls[0] == 1 and sum(calls) == 1 + 6 + 6 + 1 and max(calls) <= 6  # (no call past a batch's rows but one)
    assert batcher.stats.refused == 1 and batcher.queued() == 0


def test_windows_of_loops_that_ended_are_answered_and_free_their_places():
    """A loop that ends before its window closes (a caller that gave up waiting): its requests go
    to the worker at the next request (or the close), so they never hold their places in the
    line; then nothing waits."""
    import asyncio

    calls = []
    batcher = MicroBatcher(lambda rows, margin: (calls.append(len(rows)), rows[:, 0])[1], window_s=0.05, max_queue=2)

    async def ask(value):
        try:
            return await asyncio.wait_for(batcher.submit_async(np.full((1, 1), value)), 0.001)
        except asyncio.TimeoutError:
            return None
    try:
        for value in range(6):  # (max_queue 2: a third request would be refused if the first two kept their places)
            asyncio.run(ask(float(value)))
        deadline = time.monotonic() + 10
        while len(calls) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(calls) >= 5 and batcher.stats.refused == 0
    finally:
        batcher.close()
    assert sum(calls) == 6 and batcher.queued() == 0


def test_a_close_from_another_thread_answers_every_request_it_admitted():
    """close() on one thread while a loop on another submits: each request is refused at once
    (RuntimeError) or answered, its window handed over on its own loop."""
    import asyncio

    for _ in range(5):
        batcher = MicroBatcher(lambda rows, margin: rows[:, 0], window_s=0.2, max_queue=10**6, max_rows=10**6)
        futures, started = [], threading.Event()

        def submitting(batcher, futures, started):  # (this round's, bound: the thread ends within it)
            async def main():
                started.set()
                while True:
                    try:
                        futures.append(batcher.submit_async(np.ones((1, 1))))
                    except RuntimeError:
                        break
                    if len(futures) % 50 == 0:
                        await asyncio.sleep(0)
                await asyncio.wait(futures, timeout=5)
            asyncio.run(main())
        thread = threading.Thread(target=submitting, args=(batcher, futures, started))
        thread.start()
        assert started.wait(10)
        time.sleep(0.002)
        batcher.close()
        thread.join(20)
        assert futures and all(f.done() and f.result().tolist() == [1.0] for f in futures)
        assert batcher.queued() == 0


def test_a_request_that_fails_in_a_batch_fails_alone():
    def predict(rows, margin):
        if np.isinf(rows).any():
            raise sf.InputError("rows hold infinity")
        return rows[:, 0] * 2

    batcher = MicroBatcher(predict, window_s=0.05)
    try:
        futures = [batcher.submit(np.array([[np.inf if k == 2 else k]])) for k in range(5)]
        for k, future in enumerate(futures):
            if k == 2:
                with pytest.raises(sf.InputError, match="infinity"):
                    future.result(timeout=10)
            else:
                assert future.result(timeout=10).tolist() == [2.0 * k]
    finally:
        batcher.close()


def test_a_request_whose_rows_an_output_refuses_fails_alone_whatever_it_asked_beside():
    """Contributions are computed once for the requests asking for them, margins or values beside:
    a request whose rows they refuse gets its error, and the others their own answers."""
    calls = []

    def predict(rows, margin):
        calls.append(("predict", len(rows), margin))
        return rows[:, 0] * 2 + (100 if margin else 0)

    def explain(rows, output):
        calls.append((output, len(rows)))
        if np.isinf(rows).any():
            raise sf.InputError("rows hold infinity")
        return rows * 3

    batcher = MicroBatcher(predict, window_s=0.05, explain=explain)
    try:
        asks = [(False, "pred_contribs"), (True, "pred_contribs"), (True, None), (False, "pred_contribs")]
        futures = [batcher.submit(np.array([[np.inf if k == 3 else float(k)]]), margin, explained)
                   for k, (margin, explained) in enumerate(asks)]
        with pytest.raises(sf.InputError, match="infinity"):
            futures[3].result(timeout=10)
        for k, (margin, explained) in enumerate(asks[:3]):
            got = futures[k].result(timeout=10)
            values = got if explained is None else got[0]
            assert values.tolist() == [2.0 * k + (100 if margin else 0)]
            if explained is not None:
                assert got[1].tolist() == [[3.0 * k]]
    finally:
        batcher.close()
    assert calls.count(("pred_contribs", 3)) == 1  # (once for both kinds, then each alone)


def test_rows_as_lists_join_a_batch_as_float64_and_answers_are_encoded_each_alone():
    """Requests whose rows are lists (floats and None) and arrays in one batch: one predict call
    of their rows made float64 (None NaN), each answer encoded by ``encode``; an answer that
    cannot be encoded fails its own request alone."""
    seen = []

    def predict(rows, margin):
        seen.append(rows.copy())
        return rows[:, 0] + np.nan_to_num(rows[:, 1], nan=100.0)

    def encode(values):
        if max(values) > 1000:
            raise ValueError("too large to answer")
        return json.dumps(values).encode()

    batcher = MicroBatcher(predict, window_s=0.3, encode=encode)
    try:
        bodies = [[[1.5, None]], np.array([[2.0, 3.0], [4.0, np.nan]]), [[5e3, 1.0]], [[0.25, 0.5]]]
        futures = [batcher.submit(rows) for rows in bodies]
        assert futures[0].result(timeout=10) == b"[101.5]"
        assert futures[1].result(timeout=10) == b"[5.0, 104.0]"
        with pytest.raises(ValueError, match="too large"):
            futures[2].result(timeout=10)
        assert futures[3].result(timeout=10) == b"[0.75]"
        assert len(seen) == 1 and seen[0].dtype == np.float64
        np.testing.assert_array_equal(seen[0], [[1.5, np.nan], [2.0, 3.0], [4.0, np.nan], [5e3, 1.0], [0.25, 0.5]])
    finally:
        batcher.close()


def test_predictions_that_cannot_be_answered_fail_their_batch_alone_and_the_worker_lives():
    """A predict whose output is no array of one entry a row (a custom predict's): the requests
    of that call get its error, each alone, and the next requests are answered."""
    calls = []

    def predict(rows, margin):
        calls.append(len(rows))
        return [[1.0, [2.0]]] if len(calls) == 1 else rows[:, 0]

    batcher = MicroBatcher(predict, window_s=0.0, encode=lambda values: values)
    try:
        with pytest.raises(ValueError):
            batcher.submit([[1.5, 2.0]]).result(timeout=10)
        assert batcher.submit([[2.5, 2.0]]).result(timeout=10) == [2.5]
    finally:
        batcher.close()


def test_the_batcher_refuses_rather_than_queueing_past_its_bound():
    entered, release = threading.Event(), threading.Event()

    def predict(rows, margin):
        entered.set()
        release.wait(10)
        return rows[:, 0]

    batcher = MicroBatcher(predict, window_s=0.0, max_queue=1)
    try:
        first = batcher.submit(np.ones((1, 1)))
        assert entered.wait(10)  # the worker holds the first request
        second = batcher.submit(np.ones((1, 1)))  # waits in the line of one
        with pytest.raises(QueueFull):
            batcher.submit(np.ones((1, 1)))
        release.set()
        assert first.result(timeout=10).tolist() == [1.0] and second.result(timeout=10).tolist() == [1.0]
        assert batcher.stats.refused == 1
    finally:
        release.set()
        batcher.close()


def test_a_loops_few_rows_are_answered_on_the_loop_where_their_calls_are_cheap():
    """A loop's batch of up to INLINE_ROWS rows asking for predictions is predicted on the loop
    itself once the calls of so few rows have been measured cheap (the worker measures the
    first); calls slower than ``inline_s``, ``inline_s=0``, more rows, and requests asking for
    contributions go to the worker.  Answers are the same either way, a failing request's error
    its own."""
    import asyncio

    from silvanforge_serve.batching import INLINE_ROWS

    def run(inline_s, rows_each, delay=0.0, explained=None):
        threads = []

        def predict(rows, margin):
            threads.append(threading.get_ident())
            if np.isinf(rows).any():
                raise sf.InputError("rows hold infinity")
            time.sleep(delay)
            return rows[:, 0] * 2

        batcher = MicroBatcher(predict, window_s=0, inline_s=inline_s, explain=lambda rows, output: rows[:, :1])

        async def main():
            answers = []
            for k in range(6):  # (one window each: a request, answered, then the next)
                value = np.inf if k == 3 else float(k)
                future = batcher.submit_async(np.full((rows_each, 1), value), False, explained)
                answers.append(await asyncio.gather(future, return_exceptions=True))
            return threading.get_ident(), [a[0] for a in answers]
        try:
            loop_thread, answers = asyncio.run(main())
        finally:
            batcher.close()
        for k, got in enumerate(answers):
            if k == 3:
                assert isinstance(got, sf.InputError) and "infinity" in str(got)
            else:
                values = got if explained is None else got[0]
                assert values.tolist() == [2.0 * k] * rows_each
        return [t == loop_thread for t in threads], batcher

    on_loop, batcher = run(50e-3, 1)
    assert on_loop[0] is False and all(on_loop[1:]), on_loop  # (the first measured on the worker)
    assert batcher.small_call_s is not None and batcher.stats.calls == 6 and batcher.stats.requests == 6
    assert not any(run(1e-3, 1, delay=5e-3)[0])  # (5 ms a call, over 1 ms: the loop is not held up so)
    assert not any(run(0.0, 1)[0])
    assert not any(run(50e-3, INLINE_ROWS + 1)[0])
    assert not any(run(50e-3, 1, explained="pred_contribs")[0])
    assert all(run(50e-3, INLINE_ROWS)[0][1:])
