"""Which generations are running, per session, so that ``cancel(session_id)`` can stop them.

Every backend has the same need: ``generate`` runs in some thread while
``cancel`` comes from another (a Ctrl-C, a client that went away). A backend
opens a generation with :meth:`Cancels.running` and checks the event it gets
between tokens (or chunks of a stream); :meth:`Cancels.cancel` sets it.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class Flag:
    """Set once, read between tokens: what a cancel needs of ``threading.Event`` (nobody waits on it),
    without its condition variable and lock per generation."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True  # one attribute store: atomic, seen by the generating thread at its next check

    def is_set(self) -> bool:
        return self._set


class Cancels:
    """Thread-safe: session id -> the cancel flag of its running generation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, Flag] = {}

    @contextlib.contextmanager
    def running(self, session_id: str) -> Iterator[Flag]:
        """Register a generation of ``session_id`` for as long as the block runs."""
        event = Flag()
        with self._lock:
            self._running[session_id] = event
        try:
            yield event
        finally:
            with self._lock:
                if self._running.get(session_id) is event:
                    del self._running[session_id]

    def cancel(self, session_id: str) -> bool:
        """Stop the running generation of ``session_id``; False when none runs."""
        with self._lock:
            event = self._running.get(session_id)
        if event is None:
            return False
        event.set()
        return True
