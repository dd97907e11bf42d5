"""GLM-4-9B-Chat: a tool segment is the tool name, then the arguments as JSON.

::

    get_weather
    {"location": "Beijing"}

The call is announced when the arguments begin with ``{`` and they stream as
they come; a body that is not JSON makes the segment content, with a note.
"""
from __future__ import annotations

from ..lark import EMPTY, Text
from . import forcing_shapes as shape
from .calls import JsonArgs
from .segments import SegmentFormat
from .sink import WS
from .syntax import Forcing, Syntax


class GLM4(SegmentFormat):
    def tool_open(self) -> None:
        self.lead = ""  # whitespace before the arguments
        self.args: JsonArgs | None = None
        self.tail = ""  # what follows the arguments

    def tool_feed(self, text: str) -> None:
        if self.args is None:
            head = (self.lead + text).lstrip(WS)
            if not head:
                self.lead += text
                return
            if head[0] != "{":
                self.give_back(self.lead + text, f"GLM-4 call of {self.name!r} without JSON arguments")
                return
            self.args = JsonArgs(self.sink, self.sink.start_call(self.name))
            text = head
        if not (self.args.lex.done or self.args.lex.error):
            text = text[self.args.feed(text):]
        self.tail += text

    def tool_close(self) -> None:
        if self.args is None:
            self.give_back(self.lead, f"GLM-4 call of {self.name!r} without arguments")
            return
        self.args.close()
        if self.tail.strip(WS):
            self.sink.note(f"text after the arguments of {self.name!r}: {self.tail.strip()[:20]!r}...; kept as content")
            self.sink.content.write(self.tail)


# GLM-4's template renders a call as an assistant message: the name as its metadata line, then the JSON
SYNTAX = Syntax("glm4", GLM4, Forcing(shape.single, shape.named_calls(lambda name, mark: Text(name + "\n"),
                                                                    lambda mark: EMPTY)))
