"""ChatGLM3: a tool segment is the tool name, then ``tool_call(k=v, ...)`` in a Python fence.

::

    get_current_weather
    ```python
    tool_call(location="beijing", unit="celsius")
    ```

ChatGLM3's reference code runs ``eval`` on that; here it is parsed with
``ast`` and literal values only (:mod:`.pycall`), and anything else is
content with a note. The ``interpreter`` segment holds code to run, reported
as a call ``interpreter`` with ``{"code": ...}``. A call is announced when its
segment ends, whole.
"""
from __future__ import annotations

from ..lark import Expr, Text, seq
from . import forcing_params as by_param
from . import forcing_shapes as shape
from .base import args_json, whole_call
from .channel_lead import Mark
from .pycall import literal_call
from .segments import SegmentFormat
from .sink import WS
from .syntax import Forcing, Syntax


def unfence(body: str) -> str:
    """The code inside a Markdown fence (the fence lines dropped, as GLM's process_response does)."""
    code = body.strip(WS)
    if code.startswith("```"):
        code = code.split("\n", 1)[1] if "\n" in code else ""
        if code.rstrip(WS).endswith("```"):
            code = code.rstrip(WS)[:-3]
    return code.strip(WS)


class ChatGLM3(SegmentFormat):
    def tool_open(self) -> None:
        self.body = ""

    def tool_feed(self, text: str) -> None:
        self.body += text

    def tool_close(self) -> None:
        code = unfence(self.body)
        try:
            if self.name == "interpreter":
                args = args_json({"code": code})
            else:
                args = args_json(literal_call(code, "tool_call")[1])
        except ValueError as exc:
            self.give_back(self.body, f"ChatGLM3 call of {self.name!r} not parsed ({exc})")
            return
        whole_call(self.sink, self.name, args)


def _call(name: str, args: Expr, mark: Mark) -> Expr:
    # ChatGLM3's format_function_call, as its template renders it: the name line, then the call in a fence
    return seq(Text(name + "\n ```python\ntool_call("), args, Text(")\n```"))


def _param(tool: str, p: by_param.Param, mark: Mark) -> Expr:
    return seq(Text(p.name + "="), by_param.python_value(tool, p))


# forced, the answer is one call: the turn ends at <|observation|>, which the template renders before the result
SYNTAX = Syntax("chatglm3", ChatGLM3, Forcing(shape.single, shape.param_calls(_call, _param, sep=Text(", "))))
