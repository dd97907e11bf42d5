"""The loops: a prompt_toolkit terminal UI, or plain stdin lines for scripts and tests.

Keys (terminal): Enter sends; Esc+Enter or Alt+Enter inserts a newline, and so
does a paste (bracketed paste keeps its newlines); a message that starts with
three double quotes goes on over several lines until one that ends with them
(as in Ollama); ↑/↓ walk the persistent history; Tab completes commands; Ctrl-C clears the line, or at an empty
prompt says how to leave; Ctrl-D leaves. Ctrl-C during a reply stops it
(see :mod:`.streaming`).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, TextIO

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.key_binding import KeyBindings

from ..backends.base import Threaded
from ..errors import LmchatError
from ..registry import template_names
from .commands import completion_tree, dispatch
from .conversation import Conversation
from .speed import SpeedWatch
from .toolbar import toolbar_text

if TYPE_CHECKING:
    from prompt_toolkit.history import History
    from prompt_toolkit.input import Input
    from prompt_toolkit.key_binding.key_processor import KeyPressEvent
    from prompt_toolkit.output import Output

EXIT_HINT = "(/exit or Ctrl-D leaves)"
BLOCK = '"""'  # opens and closes a multi-line message


def handle(conv: Conversation, text: str) -> bool:
    """One input: a command, or a message (``//`` escapes a leading slash). False: leave.

    Errors print one line and the session lives on; ``conv.failures`` counts them.
    """
    text = unquote(text.strip())
    if not text:
        return True
    try:
        if text.startswith("/") and not text.startswith("//"):
            return dispatch(conv, text)
        conv.ask(text[1:] if text.startswith("//") else text)
    except BrokenPipeError:
        raise  # nobody reads the replies any more (`lmchat chat ... | head`): leave, quietly (cli.main)
    except (LmchatError, OSError) as exc:
        conv.failures += 1
        conv.out.error(str(exc))
    return True


def unquote(text: str) -> str:
    """The text of a triple-quoted block (Ollama's multi-line input), else ``text``."""
    if len(text) >= 6 and text.startswith(BLOCK) and text.endswith(BLOCK):
        return text[3:-3].strip("\n")
    return text


def open_block(text: str) -> bool:
    """Whether ``text`` starts a triple-quoted block that is not closed yet."""
    text = text.strip()
    return text.startswith(BLOCK) and (len(text) < 6 or not text.endswith(BLOCK))


def run_plain(conv: Conversation, stdin: TextIO) -> int:
    """Each line of stdin is a message or a command (a triple-quoted block spans lines); 1 if any failed."""
    pending = ""
    for line in iter(stdin.readline, ""):
        if pending or open_block(line):
            pending += line
            if open_block(pending):
                continue
            line, pending = pending, ""
        if not handle(conv, line):
            break
    if pending:
        handle(conv, pending + BLOCK)  # input ended inside a block: send what it holds
    return 1 if conv.failures else 0


def run_terminal(conv: Conversation, *, history: History | None = None, input: Input | None = None,
                 output: Output | None = None) -> int:
    """The interactive prompt; ``input``/``output`` are prompt_toolkit's (tests pass a pipe)."""
    prompt: PromptSession[str] = PromptSession(
        ">>> ",
        multiline=True,
        prompt_continuation="... ",
        key_bindings=_key_bindings(),
        history=history,
        completer=_SlashCompleter(completion_tree(template_names())),
        complete_while_typing=True,
        bottom_toolbar=lambda: toolbar_text(conv, _columns()),
        input=input,
        output=output,
    )
    watch = SpeedWatch(conv.backend.threads if isinstance(conv.backend, Threaded) else None)
    while True:
        try:
            text = prompt.prompt()
        except KeyboardInterrupt:  # only at an empty prompt: a non-empty line is just cleared
            conv.out.info(EXIT_HINT)
            continue
        except EOFError:
            return 0
        last = conv.last
        try:
            if not handle(conv, text):
                return 0
        except KeyboardInterrupt:  # Ctrl-C while a command ran (a turn only ever cancels)
            conv.out.info(f"interrupted {EXIT_HINT}")
        if conv.last is not None and conv.last is not last:  # a turn ran (a message, /retry, /continue)
            note = watch.note(conv.last)
            if note:
                conv.out.info(note)


def _columns() -> int | None:
    """The terminal's width, for the toolbar (prompt_toolkit cuts a longer one at the edge)."""
    from prompt_toolkit.application import get_app

    try:
        return get_app().output.get_size().columns
    except Exception:  # noqa: BLE001 - no size known (a pipe in tests): nothing is cut
        return None


def _key_bindings() -> KeyBindings:
    kb = KeyBindings()

    @kb.add("enter")
    def _send(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if open_block(buffer.text):  # inside a triple-quoted block Enter is a newline, until the closing quotes
            buffer.insert_text("\n")
        else:
            buffer.validate_and_handle()

    @kb.add("escape", "enter")  # what terminals send for Alt+Enter
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @kb.add("c-c")
    def _clear_or_interrupt(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.text:
            buffer.reset()
        else:
            event.app.exit(exception=KeyboardInterrupt, style="class:aborting")

    return kb


class _SlashCompleter(Completer):
    """Completes a command at the start of the input, then its argument.

    (prompt_toolkit's NestedCompleter splits words at '/', so it cannot complete '/he'.)
    """

    def __init__(self, tree: dict[str, dict[str, None] | None]) -> None:
        self.tree = tree

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterator[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/") or "\n" in text:
            return
        name, space, arg = text.partition(" ")
        options, word = (self.tree, name) if not space else (self.tree.get(name) or {}, arg)
        if " " in word:
            return
        for option in options:
            if option.startswith(word) and option != word:
                yield Completion(option, start_position=-len(word))
