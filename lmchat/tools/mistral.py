"""Mistral (v0.3, Nemo, Mixtral-8x22B, Small 3/3.1): ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]``;
v11+ (Small 3.2, Magistral, Devstral): ``[TOOL_CALLS]NAME[ARGS]{...}`` (``mistral_v11``).

Mistral's templates only accept tool-call ids of 9 alphanumeric characters;
models do not write ids, so they are generated (an id the model writes before
the name is kept when it is valid). IBM Granite 3 writes the same JSON array
after ``<|tool_call|>``. Text after the array is content.
"""
from __future__ import annotations

from ..lark import EMPTY, Expr, Pattern, Text, opt, seq
from . import forcing_shapes as shape
from .base import NAME, RegionFormat, cut
from .calls import JsonArgs
from .channel_lead import Mark
from .seq import CallSeq
from .sink import WS, Sink, mistral_id, openai_id
from .syntax import Forcing, Syntax

OPEN = "[TOOL_CALLS]"


class Mistral(RegionFormat):
    opens = (OPEN,)
    ids = staticmethod(mistral_id)

    def open(self, marker: str) -> CallSeq:
        return CallSeq(self.sink, "any", marker)


class Granite(Mistral):
    opens = ("<|tool_call|>",)
    ids = staticmethod(openai_id)


ARGS, CALL_ID = "[ARGS]", "[CALL_ID]"


class V11Call:
    """One ``NAME[CALL_ID]ID[ARGS]{...}`` call after ``[TOOL_CALLS]`` (``[CALL_ID]ID`` optional).

    The call is announced at ``[ARGS]`` (or at the ``{`` of the arguments: a
    decoder that skips special tokens drops ``[ARGS]``, as vLLM's does) and its arguments stream as they come;
    the region ends with the arguments object, and what follows is scanned
    again (another ``[TOOL_CALLS]``, or content). A region that opens with
    ``[`` or ``{`` is the older JSON list, ``[TOOL_CALLS][{"name": ..., "arguments": ...}]``,
    which Mistral's v7 tokenizer models write.
    """

    def __init__(self, sink: Sink):
        self.sink = sink
        self.state = "name"  # name, id (after [CALL_ID]), args (after [ARGS]), legacy (a JSON list), done
        self.raw = ""  # the text of the call until it is announced, given back as content if it is none
        self.buf = ""
        self.name = ""
        self.args: JsonArgs | None = None
        self.legacy: CallSeq | None = None

    def feed(self, text: str) -> str | None:
        if self.state == "done":
            return text
        self.buf += text
        if self.state == "name" and self._legacy():
            self.legacy, self.state = CallSeq(self.sink, "any", OPEN), "legacy"
        if self.state == "legacy":
            assert self.legacy is not None, "made when the state became legacy"
            text, self.buf = self.buf, ""
            return self.legacy.feed(text)
        while self.state in ("name", "id"):
            pos, marker = cut(self.buf, (ARGS, CALL_ID), final=False)
            written = marker or ""
            brace = self.buf.find("{")
            if brace >= 0 and (marker is None or brace < pos):  # [ARGS] left out (a decoder that skips it)
                pos, marker, written = brace, ARGS, ""
            if marker is None:
                return None  # the rest of the head has yet to come
            head, self.buf = self.buf[:pos], self.buf[pos + len(written):]
            self.raw += head + written
            if self.state == "name":
                self.name = head.strip(WS)
                if not NAME.fullmatch(self.name):
                    return self._fail(f"the tool name {self.name[:20]!r} is not a name")
                self.state = "id" if marker == CALL_ID else "args"
                model_id = None
            elif marker == ARGS:
                model_id, self.state = head.strip(WS), "args"
            else:
                return self._fail("two [CALL_ID] in one call")
            if self.state == "args":
                self.args, self.raw = JsonArgs(self.sink, self.sink.start_call(self.name, model_id)), ""
        assert self.args is not None, "made when the state became args"
        n = self.args.feed(self.buf)
        rest, self.buf = self.buf[n:], ""
        if self.args.lex.done or self.args.lex.error:
            self.args.close()
            self.state = "done"
            return rest
        return None

    def _legacy(self) -> bool:
        """Whether the region opens with JSON (``[{`` or ``{``) rather than a name (False: not yet known)."""
        head = self.buf.lstrip(WS)
        if not head or head[0] not in "[{":
            return False
        markers = (ARGS, CALL_ID)
        if any(m.startswith(head) for m in markers if len(head) < len(m)):
            return False  # perhaps a marker still arriving: decided by the next chunk
        return not head.startswith(markers)  # an empty name is a malformed call, judged as such

    def close(self, marker: str) -> None:
        """The answer ended inside the call."""
        if self.state == "legacy":
            assert self.legacy is not None, "made when the state became legacy"
            self.legacy.close(marker)
        elif self.args is not None:
            if self.state != "done":
                self.args.close()
        elif self.state != "done":
            self.raw += self.buf
            self._fail("a [TOOL_CALLS] without [ARGS]")

    def _fail(self, why: str) -> str:
        """Not a call: its text back as content, with a note; the rest of the answer is scanned again."""
        self.sink.content.write(OPEN + self.raw)
        self.sink.note(f"{why}; kept as content")
        self.state = "done"
        rest, self.buf = self.buf, ""
        return rest


class MistralV11(RegionFormat):
    """Mistral tokenizer v11+ (Small 3.2, Magistral, Devstral): ``[TOOL_CALLS]NAME[ARGS]{...}`` per call."""

    opens = (OPEN,)
    markers = (OPEN, CALL_ID, ARGS)
    ids = staticmethod(mistral_id)

    def open(self, marker: str) -> V11Call:
        return V11Call(self.sink)


def _v11_head(name: str, mark: Mark) -> Expr:
    # [CALL_ID] is what Small 3.2's template renders before the arguments: the model may write one, and the
    # history then renders back what it wrote
    call_id = opt(seq(mark(CALL_ID), Pattern("[a-zA-Z0-9]{9}")))
    return seq(mark(OPEN), Text(name), call_id, mark(ARGS))


# the template renders each call's id after its arguments, as Mistral's models were trained on: the model may
# write one (the parser keeps only an id written before the name and makes the call's own)
SYNTAX = Syntax("mistral", Mistral, Forcing(shape.array(OPEN, opt(Text(" "))), shape.json_calls(
    "arguments", id={"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"})))
GRANITE = Syntax("granite", Granite, Forcing(shape.array("<|tool_call|>", EMPTY), shape.json_calls("arguments")))
V11 = Syntax("mistral_v11", MistralV11, Forcing(shape.back_to_back, shape.named_calls(_v11_head, lambda mark: EMPTY)))
