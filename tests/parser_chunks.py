"""Feeding a model's answer to a streaming parser in chunks, as an engine's tokens come, and comparing parses:
shared by the parser tests. ``stream_options`` are what :class:`ResponseStream` and ``parse_response`` take
besides the format (``prompt_opened``, ``tools``: the request's, whose schemas type the values)."""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from lmchat import parse_response
from lmchat.tools import ResponseStream, collect


def calls(parsed: Any, ids: bool = False) -> list[tuple[Any, ...]]:
    """The parsed tool calls as ``(name, arguments)``, the arguments read as JSON; ``ids``: ``(id, name,
    arguments)``."""
    return [((c["id"],) if ids else ()) + (c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in parsed.tool_calls]


def normal(parsed: Any, ids: bool = False) -> tuple[Any, ...]:
    """What two parses of one answer must agree on: ``(content, reasoning_content, calls, errors)``."""
    return parsed.content, parsed.reasoning_content, calls(parsed, ids), parsed.errors


def chunked(fmt: Any, text: str, cuts: Sequence[int], **stream_options: Any) -> Any:
    """The events of ``text`` fed to a :class:`ResponseStream` of ``fmt`` (a template or a format) cut at the
    given points (ascending), folded into one parse."""
    stream = ResponseStream(fmt, **stream_options)
    events, start = [], 0
    for end in [*cuts, len(text)]:
        events += stream.feed(text[start:end])
        start = end
    return collect(events + stream.finish())


def fed_in_sizes(fmt: Any, text: str, sizes: Sequence[int], **stream_options: Any) -> Any:
    """The events of ``text`` fed to a :class:`ResponseStream` of ``fmt`` (a template or a format) in chunks of
    the given sizes (cycled), folded into one parse."""
    stream = ResponseStream(fmt, **stream_options)
    events, i, k = [], 0, 0
    while i < len(text):
        n = sizes[k % len(sizes)]
        events += stream.feed(text[i:i + n])
        i, k = i + n, k + 1
    return collect(events + stream.finish())


def check_every_split(fmt: Any, text: str, sizes: Sequence[Sequence[int]] = ([1],), ids: bool = False,
                      **stream_options: Any) -> Any:
    """The whole text's parse, once the text cut in two at every point and fed in chunks of each of ``sizes``
    (``[1]``: a character at a time) is asserted to parse the same (:func:`normal`; the calls' ids too if ``ids``)."""
    whole = parse_response(fmt, text, **stream_options)
    for k in range(len(text) + 1):
        assert normal(chunked(fmt, text, [k], **stream_options), ids) == normal(whole, ids), k
    for chunk_sizes in sizes:
        assert normal(fed_in_sizes(fmt, text, chunk_sizes, **stream_options), ids) == normal(whole, ids), chunk_sizes
    return whole
