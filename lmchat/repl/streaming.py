"""Running one generation: chunks stream in from a worker thread, Ctrl-C cancels.

The backend's iterator runs in a daemon thread and hands chunks over a queue;
the main thread waits on the queue with Ctrl-C turned into a flag (see
:func:`interrupt_flag`), so a Ctrl-C never lands inside the backend nor
between a chunk's arrival and its recording. On Ctrl-C the backend is asked
to ``cancel`` and the stream is drained until it ends, so every chunk the
engine produced is accounted for; a stream that finished anyway keeps its
own finish reason (the engine then holds the end marker it emitted). A
backend that does not end within ``CANCEL_GRACE`` seconds is told to
``drop`` the session: its cache state is then unknown, and the next request
carries the whole context to rebuild from.
"""
from __future__ import annotations

import contextlib
import queue
import signal
import sys
import threading
import time
from typing import Callable, Iterator

import attrs

from ..backends.base import Backend, GenerationRequest
from ..repetition import RepetitionGuard

CANCEL_GRACE = 5.0
_END = object()


@attrs.define
class Outcome:
    """A finished (or cancelled) generation; ``seconds`` runs from the first chunk to the last."""

    text: str = ""
    token_ids: list[int] = attrs.field(factory=list)
    finish_reason: str | None = None
    stop: str | None = None
    prefilled: int = 0
    reused: int = 0
    seconds: float = 0.0

    @property
    def speed(self) -> tuple[float, str]:
        """Generation speed and its unit: tokens/s when the backend gave ids, else chars/s."""
        count, unit = (len(self.token_ids), "tok/s") if self.token_ids else (len(self.text), "chars/s")
        return (count / self.seconds if self.seconds > 0 else 0.0), unit


def generate(
    backend: Backend, request: GenerationRequest, on_text: Callable[[str], None], interrupted: threading.Event,
    guard: RepetitionGuard | None = None,
) -> Outcome:
    """Stream ``request`` through ``backend``, calling ``on_text`` per piece; backend errors are re-raised.

    ``interrupted`` (see :func:`interrupt_flag`) cancels the generation once set;
    so does ``guard`` once the answer loops (finish reason ``'repetition'``).
    """
    chunks: queue.SimpleQueue = queue.SimpleQueue()

    def work() -> None:
        try:
            for chunk in backend.generate(request):
                chunks.put(chunk)
            chunks.put(_END)
        except BaseException as exc:  # handed to the main thread, which raises it
            chunks.put(exc)

    out = Outcome()
    first = last = None
    cancelled_at = None
    threading.Thread(target=work, name="lmchat-generate", daemon=True).start()
    while True:
        if interrupted.is_set() and cancelled_at is None:
            backend.cancel(request.session_id)
            cancelled_at = time.monotonic()
        try:
            item = chunks.get(timeout=0.05)
        except queue.Empty:
            if cancelled_at is not None and time.monotonic() - cancelled_at > CANCEL_GRACE:
                backend.drop(request.session_id)
                break
            continue
        if item is _END:
            break
        if isinstance(item, BaseException):
            raise item
        last = time.monotonic()
        first = first or last
        out.text += item.text
        out.token_ids.extend(item.token_ids)
        if item.finish_reason:
            out.finish_reason, out.stop = item.finish_reason, item.stop
            out.prefilled, out.reused = item.prefilled, item.reused
        if item.text:
            on_text(item.text)
            if guard is not None and guard.feed(item.text) and not interrupted.is_set():
                interrupted.set()  # cancels at the top of the loop; what is in flight is still recorded
    if out.finish_reason is None:  # cancelled, or a stream that ended without its last chunk
        out.finish_reason = "cancelled"
    if guard is not None and guard.tripped and out.finish_reason == "cancelled":
        out.finish_reason = "repetition"
    out.seconds = (last - first) if first is not None else 0.0
    return out


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
