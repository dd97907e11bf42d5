"""Mistral (v0.3, Nemo, Mixtral-8x22B): ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]``.

Mistral's templates only accept tool-call ids of 9 alphanumeric characters;
models do not write ids, so they are generated (an id the model writes before
the name is kept when it is valid). IBM Granite 3 writes the same JSON array
after ``<|tool_call|>``. Text after the array is content.
"""
from __future__ import annotations

from .base import RegionFormat
from .seq import CallSeq
from .sink import mistral_id, openai_id


class Mistral(RegionFormat):
    opens = ("[TOOL_CALLS]",)
    ids = staticmethod(mistral_id)

    def open(self, marker: str) -> CallSeq:
        return CallSeq(self.sink, "any", marker)


class Granite(Mistral):
    opens = ("<|tool_call|>",)
    ids = staticmethod(openai_id)
