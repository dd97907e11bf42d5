"""JSON tool calls, streamed: a call object announced once its name is complete, and bare arguments.

Arguments are released as the raw text of their JSON value up to the lexer's
safe point (see :mod:`.jsonlex`): what was sent is never taken back, and a
call cut off by the token limit is closed after its last complete value, with
a note.
"""
from __future__ import annotations

import json

from .base import args_json
from .jsonlex import JsonLexer
from .sink import Sink

ARG_KEYS = ("arguments", "parameters")  # Hermes/Qwen/Mistral say "arguments", Llama 3/InternLM "parameters"


class _Arguments:
    """Sends one call's arguments: a slice of the lexer's text, then what closes it."""

    def __init__(self, sink: Sink, index: int | None):
        self.sink = sink
        self.index = index
        self.lex = JsonLexer()
        self._sent: int | None = None  # position in the lexer's text up to which arguments went out

    @property
    def _index(self) -> int:
        """The announced call's index: arguments are sent and a call is closed only once it is announced (a
        JsonCall's name read; CallSeq closes one without a name as content instead)."""
        assert self.index is not None, "the call is not announced yet"
        return self.index

    def _send(self, start: int, stop: int) -> None:
        if stop <= start:
            return
        if self._sent is None:
            self._sent = start
        if stop > self._sent:
            self.sink.args(self._index, self.lex.slice(self._sent, stop))
            self._sent = stop

    def _end(self, open_arguments: bool, depth: int) -> None:
        """Close the call: arguments still open are closed after their last complete value."""
        if open_arguments and self._sent is not None:
            self.sink.args(self._index, self.lex.closing(depth))
        if not self.lex.done:
            reason = self.lex.error or "the output ends inside the call"
            self.sink.note(f"{self.sink.label(self._index)}: {reason}; arguments kept up to the last complete value")
        self.sink.end_call(self._index)


class JsonArgs(_Arguments):
    """The arguments object of a call whose name came first (DeepSeek, GLM-4)."""

    def feed(self, text: str) -> int:
        n = self.lex.feed(text)
        if self.lex.begin is not None:
            self._send(self.lex.begin, self.lex.safe)
        return n

    def close(self) -> None:
        self._end(open_arguments=not self.lex.done, depth=0)


class JsonCall(_Arguments):
    """``{"name": ..., "arguments"|"parameters": {...}, "id"?: ...}``, in any key order.

    The call is announced (``index`` set) when its name is complete; an ``id``
    written before the name is used. Arguments given as a string holding a JSON
    object are accepted (some fine-tunes do that); other non-objects give ``{}``
    and a note. Subclasses name the keys a name is written under (Command-R's ``tool_name``) and the names
    that are no call (:meth:`skips`: the call is then read but not announced, and ``skipped`` is set).
    """

    #: the keys a call's name may be written under
    name_keys: tuple[str, ...] = ("name",)

    def __init__(self, sink: Sink):
        super().__init__(sink, None)
        self.problem = ""
        self.skipped = False
        self._seen = 0
        self._name: str | None = None
        self._id: str | None = None
        self._args: tuple[int, int | None] | None = None  # span of the arguments value in the lexer's text
        self._args_settled = False

    @property
    def ended(self) -> bool:
        return self.lex.done or bool(self.lex.error or self.problem)

    def feed(self, text: str) -> int:
        n = self.lex.feed(text)
        self._update()
        return n

    def close(self) -> None:
        open_arguments = self._args is not None and self._args[1] is None and not self._args_settled
        self._end(open_arguments, depth=1)

    def skips(self, name: str) -> bool:
        """Whether a call of this name stands for no call at all."""
        return False

    def _update(self) -> None:
        lex = self.lex
        for key, start, end in lex.members[self._seen:]:
            value = lex.slice(start, end)
            if key in self.name_keys and self._name is None:
                name = json.loads(value) if value.startswith('"') else None
                if not name:
                    self.problem = "the tool name is not a non-empty string"
                    return
                self._name = name
                if self.skips(name):
                    self.skipped = True
                    continue
                # announced right here, in text order, so an id written later never counts
                self.index = self.sink.start_call(name, self._id)
            elif key in ARG_KEYS and (self._args is None or self._args[0] == start):
                self._args = (start, end)
            elif key == "id" and self._id is None and value.startswith('"'):
                self._id = json.loads(value)
        self._seen = len(lex.members)
        if self._args is None and lex.member is not None and lex.member[0] in ARG_KEYS:
            self._args = (lex.member[1], None)
        if self.index is not None and self._args is not None and not self._args_settled:
            self._send_args(*self._args)

    def _send_args(self, start: int, end: int | None) -> None:
        if self.lex.slice(start, start + 1) == "{":
            self._send(start, end if end is not None else self.lex.safe)
            return
        if end is None:
            return  # a non-object value is judged once complete
        self._args_settled = True
        try:
            value = json.loads(self.lex.slice(start, end))
            self.sink.args(self._index, args_json(json.loads(value) if isinstance(value, str) else value))
        except (ValueError, RecursionError):
            self.sink.note(f"{self.sink.label(self._index)}: arguments are not a JSON object; using {{}}")
