"""Kimi-K2: calls between ``<|tool_calls_section_begin|>`` and ``<|tool_calls_section_end|>``.

Each call is ``<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>``: the
model writes an id, which Kimi's template renders back as it is (the name itself is not rendered), so the id is
kept as the call's id and the name read from it (``functions.`` and ``:IDX`` taken off, as vLLM's ``kimi_k2``
parser reads it). The call is announced once the id is complete and the arguments stream as they come; the
machine is DeepSeek's (:mod:`.deepseek_v3`), with this head.
"""
from __future__ import annotations

import re

from ..lark import Expr, Pattern, Text, seq
from . import forcing_shapes as shape
from .base import NAME, SectionFormat
from .channel_lead import Mark
from .deepseek_v3 import DeepSeekCall
from .sink import WS
from .syntax import Forcing, Syntax

SECTION_BEGIN, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL_BEGIN, ARGUMENT_BEGIN, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
_ID = re.compile(r"(?:functions\.)?(.+?)(?::\d+)?")


class KimiCall(DeepSeekCall):
    begin = CALL_BEGIN
    missing = "a Kimi-K2 tool call without a 'functions.NAME:IDX<|tool_call_argument_begin|>' head"

    def head(self) -> tuple[str, str | None, int] | None:
        sep = self.buf.find(ARGUMENT_BEGIN)
        model_id = self.buf[:sep].strip(WS)
        match = _ID.fullmatch(model_id)
        if sep < 0 or match is None or not NAME.fullmatch(match.group(1)):
            return None
        return match.group(1), model_id, sep + len(ARGUMENT_BEGIN)


class KimiK2(SectionFormat):
    opens = (SECTION_BEGIN, CALL_BEGIN, SECTION_END)
    closes = (CALL_END,)
    markers = (*opens, *closes, ARGUMENT_BEGIN)
    call_begin, section = CALL_BEGIN, (SECTION_BEGIN, SECTION_END)

    def open(self, marker: str) -> KimiCall | None:
        return KimiCall(self.sink) if marker == CALL_BEGIN else None  # the section markers only group calls


def _head(name: str, mark: Mark) -> Expr:
    # the id Kimi-K2 writes, functions.NAME:IDX (the conversation's count of calls: bounded, so that a model
    # cannot write digits for ever), which its template renders in place of the name
    return seq(mark(CALL_BEGIN), Text(f"functions.{name}:"), Pattern("(0|[1-9][0-9]{0,3})"),
               mark(ARGUMENT_BEGIN))


SYNTAX = Syntax("kimi_k2", KimiK2, Forcing(shape.sections(SECTION_BEGIN, SECTION_END),
                                           shape.named_calls(_head, lambda mark: mark(CALL_END))))
