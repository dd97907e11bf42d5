"""Reasoning (``<think>...</think>``) split from an answer, without parsing tool calls.

:func:`lmchat.parse_response` does this as part of parsing; this function is
for callers that only want the two texts.
"""
from __future__ import annotations

from typing import Any

from .tools.base import Format
from .tools.events import collect
from .tools.registry import prompt_opens_think, response_format
from .tools.sink import Sink
from .tools.think import ThinkSplitter


def split_reasoning(template: Any, text: str, *, prompt_opened: bool | None = None) -> tuple[str | None, str]:
    """``(reasoning_content, content)`` of an answer; reasoning is None when there is none.

    Templates whose models do not reason (their class's ``reasoning`` is False)
    return the text unchanged as content. ``prompt_opened``: whether the
    generation prompt left ``<think>`` open (default: the template says, e.g. QwQ).
    """
    if not response_format(template).reasoning:
        return None, text
    sink = Sink()
    opened = prompt_opens_think(template) if prompt_opened is None else prompt_opened
    splitter = ThinkSplitter(sink, Format(sink), opened)
    splitter.feed(text)
    splitter.finish()
    sink.reasoning.flush()
    sink.content.flush()
    parsed = collect(sink.take())
    return parsed.reasoning_content, parsed.content
