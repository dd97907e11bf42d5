"""Running one turn for the REPL: the turn streams from a worker thread, Ctrl-C cancels.

The turn (:class:`lmchat.turns.Turn`: generation, commit, save) runs in a
daemon thread and hands its chunks over a :class:`~lmchat.turns.Pump`; the
main thread waits on it with Ctrl-C turned into a flag (see
:func:`interrupt_flag`), so a Ctrl-C never lands inside the backend nor
between a chunk's arrival and its recording. On Ctrl-C the backend is asked
to ``cancel`` and the turn goes on to its end, which commits what the engine
produced (a stream that finished anyway keeps its own finish reason: the
engine then holds the end marker it emitted). A backend that does not end
within ``CANCEL_GRACE`` seconds is told to ``drop`` the session, which makes
engines give up what they were doing.

Until the answer's first text, the main thread draws how far the engine is
in computing the prompt (:class:`Prefill`, which the engine's thread updates
per batch): a long paste shows its progress, not a blank screen.
"""
from __future__ import annotations

import contextlib
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import attrs

from ..turns import Done, Pump, Turn, TurnResult

CANCEL_GRACE = 5.0


@attrs.frozen
class Outcome:
    """A finished (or cancelled) turn as the toolbar shows it; ``seconds`` from the first chunk to the last."""

    result: TurnResult
    seconds: float = 0.0

    @property
    def finish_reason(self) -> str:
        return self.result.finish_reason

    @property
    def reused(self) -> int:
        return self.result.reused

    @property
    def prefilled(self) -> int:
        return self.result.prefilled

    @property
    def speed(self) -> tuple[float, str]:
        """Generation speed and its unit: tokens/s when the backend gave ids, else chars/s."""
        ids, text = self.result.token_ids, self.result.text
        count, unit = (len(ids), "tok/s") if ids else (len(text), "chars/s")
        return (count / self.seconds if self.seconds > 0 else 0.0), unit


class Prefill:
    """The engine's last prefill report ``(done, total)``, set from its thread (one assignment: the main thread
    reads a whole pair), read by the main thread that draws it."""

    def __init__(self) -> None:
        self.latest: tuple[int, int] | None = None

    def __call__(self, done: int, total: int) -> None:
        self.latest = (done, total)


A = TypeVar("A")


class _Daemons:
    """An executor of daemon threads: a hung backend never keeps the REPL from exiting."""

    def submit(self, fn: Callable[[A], None], arg: A, /) -> None:
        threading.Thread(target=fn, args=(arg,), name="lmchat-turn", daemon=True).start()


def stream(turn: Turn, on_text: Callable[[str], None], interrupted: threading.Event,
           on_prefill: Callable[[int, int], None] | None = None, prefill: Prefill | None = None) -> Outcome:
    """Run the primed ``turn`` to its end, calling ``on_text`` per piece; its errors are re-raised. ``on_prefill``
    draws each new report of ``prefill`` (the turn's :attr:`GenerationRequest.progress`) until text comes."""
    generator = turn.run()
    next(generator)  # primed: errors before the generation raised already
    pump = Pump(lambda: generator, _Daemons())
    backend, key = turn.owner.backend, turn.session_id
    cancelled_at, dropped = None, False
    broken: BaseException | None = None  # on_text failed (stdout is a closed pipe): cancel, and raise it at the end
    drawn: tuple[int, int] | None = None
    while True:
        if on_prefill is not None and prefill is not None and prefill.latest != drawn:
            drawn = prefill.latest
            if drawn is not None:
                on_prefill(*drawn)
        if (interrupted.is_set() or broken is not None) and cancelled_at is None:
            backend.cancel(key)
            cancelled_at = time.monotonic()
        try:
            item = pump.get(timeout=0.05)
        except queue.Empty:
            if cancelled_at is not None and not dropped and time.monotonic() - cancelled_at > CANCEL_GRACE:
                backend.drop(key)  # a backend that ignores cancel gives up what it was doing
                dropped = True
            continue
        if isinstance(item, Done):
            if broken is not None:
                raise broken  # the turn has ended: committed and saved, nothing left running behind
            last = time.monotonic()
            return Outcome(item.value, (last - turn.first_chunk) if turn.first_chunk else 0.0)
        assert item is not None  # Turn.run yields None only to prime, taken before the pump started
        if item.text:
            on_prefill = None  # the answer has begun: its text replaces the progress
        if item.text and broken is None:
            try:
                on_text(item.text)
            except Exception as exc:  # noqa: BLE001 - re-raised once the turn has ended
                # leaving now would leave the turn running in its thread, to commit and save later,
                # behind the caller's back (after the store was closed, or over the next turn's version)
                broken = exc


@contextlib.contextmanager
def interrupt_flag() -> Iterator[threading.Event]:
    """Ctrl-C sets an event instead of raising KeyboardInterrupt, while a turn runs.

    A KeyboardInterrupt can surface at any loop back-edge, outside every
    ``try`` of the loop body, or between a generation and its commit, and
    would lose text the engine holds; a flag cannot. Only the main thread
    receives signals, so elsewhere the event never fires.
    """
    event = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield event
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: event.set())
    try:
        with _no_echo():
            yield event
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _no_echo() -> Iterator[None]:
    """The terminal does not echo typed keys (Ctrl-C's ``^C``) into a reply being drawn.

    The reply is redrawn in place by moving the cursor up over what it drew;
    an echoed ``^C`` moves the cursor first, and the redraw then leaves the
    reply's first line twice on the screen.
    """
    try:
        import termios
    except ImportError:  # Windows
        yield
        return
    try:
        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
    except (termios.error, OSError, ValueError, AttributeError):  # not a terminal: pipes, tests
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~(termios.ECHO | termios.ECHOCTL)
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)
