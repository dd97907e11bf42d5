"""Feeding a model's answer to a streaming parser in chunks, as an engine's tokens come: shared by the parser tests."""
from __future__ import annotations

from typing import Any

from lmchat.tools import ResponseStream, collect


def fed_in_sizes(fmt: Any, text: str, sizes: list[int], tools: list[dict[str, Any]] | None = None) -> Any:
    """The events of ``text`` fed to a :class:`ResponseStream` of ``fmt`` (a template or a format) in chunks of
    the given sizes (cycled), folded into one parse; ``tools`` as the request gives them (their schemas)."""
    stream = ResponseStream(fmt, tools=tools)
    events, i, k = [], 0, 0
    while i < len(text):
        n = sizes[k % len(sizes)]
        events += stream.feed(text[i:i + n])
        i, k = i + n, k + 1
    return collect(events + stream.finish())
