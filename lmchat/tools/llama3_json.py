"""Llama 3.1/3.2/3.3 JSON calls: ``{"name": ..., "parameters": {...}}``, several joined by ``;``.

The calls either make up the whole answer (it starts with ``{``) or follow
``<|python_tag|>`` (visible with ``skip_special_tokens=False``). After the tag,
Llama 3.1 may instead call a built-in tool in Python syntax,
``brave_search.call(query="...")``, which is parsed without running anything.
An answer that starts with ``{`` but is not a call comes back as content with
a note.
"""
from __future__ import annotations

from . import forcing_shapes as shape
from .base import RegionFormat, args_json, whole_call
from .pycall import literal_call
from .seq import CallSeq
from .sink import WS, Sink
from .syntax import Forcing, Syntax

TAG = "<|python_tag|>"


class PythonTag:
    """What follows ``<|python_tag|>``: JSON calls, or one built-in call up to the end of the answer."""

    def __init__(self, sink: Sink):
        self.sink = sink
        self.seq: CallSeq | None = None
        self.code = ""

    def feed(self, text: str) -> str | None:
        if self.seq is None:
            self.code += text
            if not self.code.lstrip(WS).startswith("{"):
                return None  # a built-in call (or only whitespace so far): judged at the end
            self.seq = CallSeq(self.sink, "list", TAG)
            text, self.code = self.code, ""
        return self.seq.feed(text)

    def close(self, marker: str) -> None:
        if self.seq is not None:
            self.seq.close()
            return
        try:
            name, kwargs = literal_call(self.code)
            args = args_json(kwargs)
        except ValueError as exc:
            self.sink.content.write(TAG + self.code)
            self.sink.note(f"not a tool call after {TAG} ({exc}); kept as content")
            return
        whole_call(self.sink, name, args)


class Llama3Json(RegionFormat):
    opens = (TAG,)
    verbatim_without_markers = False  # an answer that starts with "{" is calls

    def __init__(self, sink: Sink):
        super().__init__(sink)
        self._started = False

    def open(self, marker: str) -> PythonTag:
        return PythonTag(self.sink)

    def step(self, final: bool) -> None:
        if not self._started:
            head = self.buf.lstrip(WS)
            if not head and not final:
                return
            self._started = True
            if head.startswith("{"):  # the whole answer is calls
                self.region = CallSeq(self.sink, "list")
        super().step(final)


# forced, the whole answer is the call object, as the templates render it (no <|python_tag|>)
SYNTAX = Syntax("llama3_json", Llama3Json, Forcing(shape.single, shape.json_calls("parameters")))
