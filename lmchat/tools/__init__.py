"""Parsing model output: tool calls in each model family's syntax, and reasoning.

See ``docs/tools.md``. The entry points are :func:`parse_response` and
:class:`ResponseStream`; :data:`FORMATS` lists the syntaxes and
:data:`TEMPLATE_FORMATS` which built-in template uses which.
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
    TEMPLATE_FORMATS,
    ResponseFormat,
    prompt_opens_think,
    response_format,
)
from .stream import ResponseStream, parse_response

__all__ = [
    "FORMATS",
    "TEMPLATE_FORMATS",
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
