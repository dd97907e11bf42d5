"""The turn bridge (lmchat.turns.bridge.Pump): a generator in a worker thread, its items on an asyncio loop
or a thread, in order, with one loop wake-up per batch of items rather than per item."""
from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from lmchat.turns.bridge import Done, Pump


class CountingPump(Pump):
    wakes = 0

    def _wake(self) -> None:
        type(self).wakes += 1
        super()._wake()


def produce(n: int, closed: threading.Event | None = None):
    try:
        yield from range(n)
        return f"made {n}"
    finally:
        if closed is not None:
            closed.set()


def two_items(release: threading.Event, closed: threading.Event, started: threading.Event | None = None):
    """Yields once, then waits for ``release`` before the second item; ``closed`` when its cleanup ran."""
    try:
        if started is not None:
            started.set()
        yield "first"
        release.wait(5)
        yield "second"
    finally:
        closed.set()


def failing():
    yield 1
    raise ValueError("broken generator")


async def collect(pump: Pump) -> list:
    return [item async for item in pump.items()]


@pytest.fixture
def pool():
    with ThreadPoolExecutor(2) as executor:
        yield executor


def test_every_item_in_order_then_done_with_fewer_wakeups_than_items(pool):
    async def main():
        CountingPump.wakes = 0
        return await collect(CountingPump(lambda: produce(20_000), pool, loop=asyncio.get_running_loop()))

    items = asyncio.run(main())
    assert items[:-1] == list(range(20_000)) and items[-1] == Done("made 20000")
    # the worker appends faster than the loop wakes: one wake-up takes a batch
    assert 1 <= CountingPump.wakes < 10_000


def test_result_only_hands_over_the_result_alone(pool):
    async def main():
        CountingPump.wakes = 0
        return await collect(CountingPump(lambda: produce(500), pool, loop=asyncio.get_running_loop(),
                                          result_only=True))

    assert asyncio.run(main()) == [Done("made 500")]
    assert CountingPump.wakes == 1


def test_result_only_hands_over_what_the_generator_returned(pool):
    async def main():
        CountingPump.wakes = 0
        return await collect(CountingPump(lambda: produce(500), pool, loop=asyncio.get_running_loop(),
                                          result_only=True))

    assert asyncio.run(main()) == [Done("made 500")]
    assert CountingPump.wakes == 1


def test_result_only_raises_the_workers_error(pool):
    async def main():
        return await collect(Pump(failing, pool, loop=asyncio.get_running_loop(), result_only=True))

    with pytest.raises(ValueError, match="broken generator"):
        asyncio.run(main())


def test_a_cancelled_consumer_of_a_result_only_pump_abandons_the_worker(pool):
    closed, abandoned, started, release = (threading.Event() for _ in range(4))

    async def main():
        pump = Pump(lambda: two_items(release, closed, started), pool, loop=asyncio.get_running_loop(),
                    on_abandon=abandoned.set, result_only=True)
        waiter = asyncio.ensure_future(collect(pump))
        while not started.is_set():
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.01)  # the waiter is waiting for the result
        waiter.cancel()  # e.g. the server shutting down the request's task
        with pytest.raises(asyncio.CancelledError):
            await waiter
        release.set()
        return pump

    pump = asyncio.run(main())
    assert abandoned.is_set() and not pump.finished
    assert closed.wait(5)


@pytest.mark.parametrize("result_only", [False, True])
def test_an_error_in_the_worker_is_raised_to_the_consumer(pool, result_only):
    async def main():
        return await collect(Pump(failing, pool, loop=asyncio.get_running_loop(), result_only=result_only))

    with pytest.raises(ValueError, match="broken generator"):
        asyncio.run(main())


def test_a_consumer_that_leaves_abandons_the_worker(pool):
    closed, abandoned, release = threading.Event(), threading.Event(), threading.Event()

    async def main():
        pump = Pump(lambda: two_items(release, closed), pool, loop=asyncio.get_running_loop(), on_abandon=abandoned.set)
        items = pump.items()
        assert await items.__anext__() == "first"
        await items.aclose()  # the consumer leaves, as the manager's callers do in their `finally`
        release.set()
        return pump

    pump = asyncio.run(main())
    assert abandoned.is_set() and not pump.finished
    assert closed.wait(5)  # the worker closed the generator, whose cleanup ran


def test_a_thread_consumer_gets_items_with_a_timeout(pool):
    pump = Pump(lambda: produce(3), pool)
    assert [pump.get(5) for _ in range(4)] == [0, 1, 2, Done("made 3")]
    go = threading.Event()

    def waiting():
        go.wait(5)
        yield "late"

    late = Pump(waiting, pool)
    with pytest.raises(queue.Empty):
        late.get(0.05)  # nothing yet
    go.set()
    assert late.get(5) == "late"
