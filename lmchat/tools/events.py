"""What parsing a model's output produces: streaming events and the whole-text result.

A stream of events and the whole-text result carry the same information:
:func:`collect` folds events into a :class:`ParsedResponse`, and
:func:`lmchat.parse_response` is exactly that fold over one feed of the whole
text, so streamed and whole-text parsing cannot disagree.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs


@attrs.frozen
class ContentDelta:
    """Answer text meant for the user."""

    text: str


@attrs.frozen
class ReasoningDelta:
    """Text of the model's ``<think>`` block."""

    text: str


@attrs.frozen
class ToolCallStart:
    """A tool call begins; its name is complete (names are never streamed in pieces)."""

    index: int
    id: str
    name: str


@attrs.frozen
class ToolCallArgumentsDelta:
    """The next piece of call ``index``'s arguments, a JSON object in text; the pieces concatenate."""

    index: int
    text: str


@attrs.frozen
class ParseError:
    """The output did not follow its format here; ``note`` says what was done with it."""

    note: str


Event = ContentDelta | ReasoningDelta | ToolCallStart | ToolCallArgumentsDelta | ParseError


@attrs.frozen
class ParsedResponse:
    """A model answer split into content, reasoning and OpenAI-shaped tool calls.

    ``reasoning_content`` is None when the answer carries no reasoning text;
    ``errors`` lists notes about output that did not follow the format (such
    output is kept, as content or as a repaired call, never dropped silently).
    """

    content: str
    reasoning_content: str | None
    #: OpenAI's shape, ``{"id", "type": "function", "function": {"name", "arguments"}}``; Any: the serve routes
    #: take them as ``dict[str, Any]`` (serve/items.call_item, serve/responses answer_items): a TypedDict would
    #: not pass there
    tool_calls: list[dict[str, Any]]
    errors: list[str]


def collect(events: Iterable[Event]) -> ParsedResponse:
    """Fold a stream's events into the whole-text result."""
    content, reasoning, errors = [], [], []
    calls: list[ToolCallStart] = []
    arguments: list[list[str]] = []
    for event in events:
        if isinstance(event, ContentDelta):
            content.append(event.text)
        elif isinstance(event, ReasoningDelta):
            reasoning.append(event.text)
        elif isinstance(event, ToolCallStart):
            calls.append(event)
            arguments.append([])
        elif isinstance(event, ToolCallArgumentsDelta):
            arguments[event.index].append(event.text)
        else:
            errors.append(event.note)
    return ParsedResponse(
        content="".join(content),
        reasoning_content="".join(reasoning) if reasoning else None,
        tool_calls=[{"id": call.id, "type": "function", "function": {"name": call.name, "arguments": "".join(parts)}}
                    for call, parts in zip(calls, arguments, strict=True)],
        errors=errors,
    )
