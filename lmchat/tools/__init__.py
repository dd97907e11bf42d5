"""Parsing model output: tool calls in each model family's syntax, and reasoning.

See ``docs/tools.md``. The entry points are :func:`parse_response` and
:class:`ResponseStream`; :data:`FORMATS` lists the syntaxes, and each
template class names its model's (``tool_format``, ``reasoning``).
"""
from .events import (
    ContentDelta,
    Event,
    ParsedResponse,
    ParseError,
    ReasoningDelta,
    ToolCallArgumentsDelta,
    ToolCallStart,
    collect,
)
from .registry import (
    FORMATS,
    ResponseFormat,
    prompt_opens_think,
    response_format,
)
from .stream import ResponseStream, parse_response

__all__ = [
    "FORMATS",
    "ContentDelta",
    "Event",
    "ParseError",
    "ParsedResponse",
    "ReasoningDelta",
    "ResponseFormat",
    "ResponseStream",
    "ToolCallArgumentsDelta",
    "ToolCallStart",
    "collect",
    "parse_response",
    "prompt_opens_think",
    "response_format",
]
