"""Parsing a model's answer, streamed or whole.

:class:`ResponseStream` is the only parser; :func:`parse_response` feeds it
the whole text at once and folds the events, so both give the same result for
any chunking of the same answer.
"""
from __future__ import annotations

from collections.abc import Iterable

from ..jsontypes import JSON
from .base import Format
from .events import Event, ParsedResponse, collect
from .registry import FORMATS, ResponseFormat, TemplateLike, prompt_opens_think, response_format
from .sink import Sink
from .think import CLOSE, OPEN, ThinkSplitter


class ResponseStream:
    """Incremental parser of one answer: ``feed(chunk)`` and ``finish()`` return events.

    ``template`` is a template name, a template instance or a
    :class:`~lmchat.tools.ResponseFormat`. ``tools`` (the request's tool list)
    lets calls be checked: a call to a tool not in the list is kept and
    flagged, as are missing or mistyped arguments. ``prompt_opened`` says whether
    the generation prompt left a ``<think>`` block open; by default the template
    decides (QwQ's does).
    """

    def __init__(self, template: TemplateLike, *, tools: Iterable[JSON] | None = None,
                 prompt_opened: bool | None = None) -> None:
        fmt = response_format(template)
        cls = FORMATS[fmt.tools]
        self._sink = Sink(tools, ids=cls.ids)
        self._format = cls(self._sink)
        self._entry: Format | ThinkSplitter = self._format
        if fmt.reasoning and not cls.reasons:
            opened = prompt_opens_think(template) if prompt_opened is None else prompt_opened
            self._entry = ThinkSplitter(self._sink, self._format, opened)
        elif fmt.reasoning and prompt_opened:
            self._format.open_reasoning()  # a format whose reasoning channel the prompt opened (Gemma 4's)
        self._finished = False

    def feed(self, chunk: str) -> list[Event]:
        if self._finished:
            raise RuntimeError("feed() after finish(): start a new ResponseStream for the next answer")
        self._entry.feed(chunk)
        return self._sink.take()

    def finish(self) -> list[Event]:
        """The answer is complete: release what was held back and close what is open."""
        if not self._finished:
            self._finished = True
            self._entry.finish()
            self._sink.reasoning.flush()
            self._sink.content.flush()
        return self._sink.take()


def parse_response(
    template: TemplateLike, text: str, *, tools: Iterable[JSON] | None = None, prompt_opened: bool | None = None
) -> ParsedResponse:
    """Split a complete answer into content, reasoning and OpenAI-shaped tool calls.

    Never raises on model output: what does not follow the format comes back
    as content (or, after a call's name, as a call closed after its last
    complete value) with a note in ``errors``.
    """
    fmt = response_format(template)
    if fmt.reasoning and prompt_opened is None:
        prompt_opened = prompt_opens_think(template)  # once (it renders a prompt), for the check and the parser
    if _verbatim(fmt, text, prompt_opened):
        return ParsedResponse(content=text, reasoning_content=None, tool_calls=[], errors=[])
    stream = ResponseStream(template, tools=tools, prompt_opened=prompt_opened)
    return collect(stream.feed(text) + stream.finish())


def _verbatim(fmt: ResponseFormat, text: str, opened: bool | None) -> bool:
    """Whether the answer is all content as written, without running the parser (most answers: no markup)."""
    cls = FORMATS[fmt.tools]
    if not cls.verbatim_without_markers or any(m in text for m in cls.markers):
        return False
    if cls.reasons:
        return not (fmt.reasoning and opened)  # reasoning in the format's own channel, opened by the prompt
    return not fmt.reasoning or not (opened or OPEN in text or CLOSE in text)
