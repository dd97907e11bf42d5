"""Output of the REPL: rich Markdown on a terminal, plain text for scripts.

Both classes have the same methods: a reply streams through ``begin_reply``,
``reply_text`` and ``end_reply``; ``show`` prints text verbatim (command
output: a context, a session list); ``info`` and ``debug`` are notices,
``error`` one line per problem.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol, TextIO

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType
    from rich.live import Live
    from rich.segment import Segment


class Output(Protocol):
    """What the REPL writes to: :class:`PlainOutput` or :class:`RichOutput`."""

    def begin_reply(self) -> None: ...

    def reply_text(self, piece: str) -> None: ...

    def prefill(self, done: int, total: int) -> None:
        """How far the engine is in computing the prompt, until the reply's first text."""

    def end_reply(self, note: str | None = None) -> None: ...

    def show(self, text: str) -> None: ...

    def info(self, text: str) -> None: ...

    def debug(self, text: str) -> None: ...

    def error(self, text: str) -> None: ...


class PlainOutput:
    """stdin is not a terminal: replies and command output on stdout, notices and errors on stderr."""

    def __init__(self, stdout: TextIO | None = None, stderr: TextIO | None = None):
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr

    def begin_reply(self) -> None:
        pass

    def reply_text(self, piece: str) -> None:
        self.stdout.write(piece)
        self.stdout.flush()  # a script reading our stdout sees each piece as it comes

    def prefill(self, done: int, total: int) -> None:
        pass  # a script reads answers, not progress

    def end_reply(self, note: str | None = None) -> None:
        self.stdout.write("\n")
        self.stdout.flush()
        if note:
            self.info(note)

    def show(self, text: str) -> None:
        self.stdout.write(text if text.endswith("\n") else text + "\n")
        self.stdout.flush()

    def info(self, text: str) -> None:
        print(text, file=self.stderr, flush=True)

    def debug(self, text: str) -> None:
        print(text, file=self.stderr, flush=True)

    def error(self, text: str) -> None:
        print(f"error: {text}", file=self.stderr, flush=True)


class _Tail:
    """The last lines of a renderable that fit the screen, so a long streaming reply shows its newest text."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        from rich.segment import Segment

        lines = console.render_lines(self.renderable, options, pad=False)
        for line in lines[-max(1, console.size.height - 2):]:
            yield from line
            yield Segment.line()


class RichOutput:
    """A terminal: replies render as Markdown while they stream, notices are dimmed."""

    REFRESH_SECONDS = 0.05  # re-render Markdown at most 20 times a second

    def __init__(self, console: Console | None = None) -> None:
        from rich.console import Console

        self.console = console or Console(highlight=False)
        self._live: Live | None = None
        self._text = ""
        self._drawn = 0.0

    def begin_reply(self) -> None:
        from rich.live import Live

        self._text = ""
        if self.console.is_terminal:  # elsewhere (a file, a pipe) the reply is printed once, at the end
            self._live = Live(console=self.console, auto_refresh=False, transient=False)
            self._live.start()

    def reply_text(self, piece: str) -> None:
        from rich.markdown import Markdown

        self._text += piece
        now = time.monotonic()
        if self._live is not None and now - self._drawn >= self.REFRESH_SECONDS:
            self._drawn = now
            self._live.update(_Tail(Markdown(self._text)), refresh=True)

    def prefill(self, done: int, total: int) -> None:
        from rich.text import Text

        if self._live is not None and not self._text:
            self._live.update(Text(prefill_line(done, total), style="dim"), refresh=True)

    def end_reply(self, note: str | None = None) -> None:
        from rich.markdown import Markdown

        if self._live is not None:
            # the whole reply, taller than the screen if need be: Live prints its last render in full
            self._live.update(Markdown(self._text))
            self._live.stop()
            self._live = None
        else:
            self.console.print(Markdown(self._text))
        if note:
            self.info(note)

    def show(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True, end="" if text.endswith("\n") else "\n")

    def info(self, text: str) -> None:
        self.console.print(text, style="dim", markup=False, highlight=False)

    def debug(self, text: str) -> None:
        self.console.print(text, style="dim italic", markup=False, highlight=False, soft_wrap=True)

    def error(self, text: str) -> None:
        self.console.print(f"error: {text}", style="bold red", markup=False, highlight=False)


def prefill_line(done: int, total: int) -> str:
    """What the REPL shows while the engine computes the prompt, e.g. ``reading the prompt: 1,024/5,800 tokens``."""
    return f"reading the prompt: {done:,}/{total:,} tokens"
