"""Reasoning (``<think>...</think>``) split from an answer, without parsing tool calls.

:func:`lmchat.parse_response` does this as part of parsing; this function is
for callers that only want the two texts.
"""
from __future__ import annotations

from .tools.events import collect
from .tools.registry import FORMATS, ResponseFormat, TemplateLike, prompt_opens_think, response_format
from .tools.stream import ResponseStream


def split_reasoning(template: TemplateLike, text: str, *, prompt_opened: bool | None = None) -> tuple[str | None, str]:
    """``(reasoning_content, content)`` of an answer; reasoning is None when there is none.

    Templates whose models do not reason (their class's ``reasoning`` is False)
    return the text unchanged as content. ``prompt_opened``: whether the
    generation prompt left ``<think>`` open (default: the template says, e.g. QwQ). A format that carries
    reasoning in a channel of its own (gpt-oss's harmony) is split by its parser; its tool calls are left out.
    """
    fmt = response_format(template)
    if not fmt.reasoning:
        return None, text
    if FORMATS[fmt.tools].reasons:  # reasoning is a channel of the format (harmony): its parser splits it
        stream = ResponseStream(fmt)
        parsed = collect(stream.feed(text) + stream.finish())
        return parsed.reasoning_content, parsed.content
    opened = prompt_opens_think(template) if prompt_opened is None else prompt_opened
    # the answer parser with the plain tool format: tool-call markup stays in the content
    stream = ResponseStream(ResponseFormat(reasoning=True), prompt_opened=opened)
    parsed = collect(stream.feed(text) + stream.finish())
    return parsed.reasoning_content, parsed.content
