"""How many turns a manager runs at once, and the worker threads they may run in.

Capacity is reserved before any work (a load from the store is work), so a
request over ``max_active`` is refused at once (``CapacityExceeded``) instead
of queueing. The pool has one worker per turn that may run and a few for the
ones finishing: a reserved turn never waits in the pool's queue.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from ..errors import CapacityExceeded


class Capacity:
    """``max_active`` turns (or raw completions) at once, each with a worker thread when it needs one."""

    def __init__(self, max_active: int):
        self.max_active = max_active
        self._lock = threading.Lock()
        self._active = 0
        self.pool = ThreadPoolExecutor(max_active + 4, thread_name_prefix="lmchat-turn")

    @property
    def active(self) -> int:
        with self._lock:
            return self._active

    def reserve(self) -> None:
        """One more turn running; ``CapacityExceeded`` at ``max_active``."""
        with self._lock:
            if self._active >= self.max_active:
                raise CapacityExceeded(self.max_active)
            self._active += 1

    def release(self) -> None:
        with self._lock:
            self._active -= 1

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
