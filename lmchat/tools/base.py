"""The machinery every output format shares: held-back marker prefixes and marker-delimited regions.

A format is a state machine fed the answer text in chunks. It only acts on
what the text so far decides; whatever could still turn into a marker (``<tool_``
at the end of a chunk) is held back until the next chunk or the end. So the
result never depends on where chunks were cut, which is what makes
:func:`lmchat.parse_response` (one chunk) and streaming agree.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Protocol

from ..jsontypes import JSON
from .sink import WS, Sink, openai_id

#: what a tool name written as plain text (GLM's metadata line, DeepSeek's call header) may contain
NAME = re.compile(r"[\w.\-:/]+")


def cut(buf: str, markers: Sequence[str], final: bool) -> tuple[int, str | None]:
    """Where to stop in ``buf``: at the earliest marker, else before a suffix that could start one.

    Returns the position and the marker found there (None when none is complete).
    """
    found = [(i, m) for m in markers if (i := buf.find(m)) >= 0]
    if found:
        return min(found)
    if final:
        return len(buf), None
    longest = max((len(m) for m in markers), default=1) - 1
    for k in range(min(longest, len(buf)), 0, -1):
        tail = buf[-k:]
        if any(m.startswith(tail) for m in markers):
            return len(buf) - k, None
    return len(buf), None


def args_json(value: JSON) -> str:
    """Arguments as strict JSON text; ValueError when they are not an object of JSON values."""
    if not isinstance(value, dict):
        raise ValueError("arguments are not an object")
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"arguments are not JSON values ({exc})") from None


def whole_call(sink: Sink, name: str, args: str) -> None:
    """A call known all at once (parsed from Python syntax): announced with its arguments in one piece."""
    index = sink.start_call(name)
    sink.args(index, args)
    sink.end_call(index)


class Format:
    """Plain answers: everything is content. Subclasses parse their tool-call syntax."""

    #: how call ids are made (given the id the model wrote, if any)
    ids = staticmethod(openai_id)
    #: marker strings the model writes in its answers in this format (they are its markup, not content)
    markers: tuple[str, ...] = ()
    #: an answer without any of :attr:`markers` is all content, verbatim (False where the text itself can be a
    #: call: Llama 3's bare JSON, GLM's tool-name line); :func:`lmchat.parse_response` then skips the parser
    verbatim_without_markers = True
    #: the format carries the model's reasoning itself (harmony's analysis channel): with a template whose
    #: model reasons, no ``<think>`` block is split off before it
    reasons = False
    #: what a generation prompt ends with when it opened this format's own reasoning channel (Gemma 4's after
    #: tool results with thinking on): the answer then starts inside it; '' where no prompt does
    opened_by = ""
    #: the markers around the calls of one answer as a group (begin, end), where the format has them: markup
    #: only around calls; a begin or an end that holds no call is content as written, with a note
    section: tuple[str, str] | None = None

    def __init__(self, sink: Sink):
        self.sink = sink
        self.buf = ""

    def feed(self, text: str) -> None:
        self.buf += text
        self.step(final=False)

    def finish(self) -> None:
        self.step(final=True)

    def open_reasoning(self) -> None:
        """The generation prompt opened this format's reasoning channel (``prompt_opened``); only formats that
        carry reasoning themselves (``reasons``) and whose prompt can open it override this."""

    def step(self, final: bool) -> None:
        self.sink.content.write(self.buf)
        self.buf = ""


class Region(Protocol):
    """What :meth:`RegionFormat.open` makes: see :class:`RegionFormat`."""

    def feed(self, text: str) -> str | None: ...

    def close(self, marker: str) -> None: ...


class RegionFormat(Format):
    """Content with regions between markers; :meth:`open` makes the object that parses a region.

    A region object has ``feed(text) -> str | None`` and ``close(marker)``.
    Regions of formats without closing markers end by themselves: ``feed``
    then returns the text after them, which is scanned as content again.
    ``close`` gets the closing marker ('' at the end of the answer) so a region
    that turns out not to be a call can give its text back verbatim.
    """

    opens: tuple[str, ...] = ()
    closes: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "markers" not in cls.__dict__:  # a format with markers inside its regions lists them itself
            cls.markers = tuple(dict.fromkeys((*cls.opens, *cls.closes)))

    def __init__(self, sink: Sink):
        super().__init__(sink)
        self.region: Region | None = None

    def open(self, marker: str) -> Region | None:
        raise NotImplementedError

    def kept(self, marker: str, final: bool) -> bool | None:
        """Whether the opening ``marker`` just found (:attr:`buf` holds what follows it) is text here: kept as
        content with a note (True), markup (False), or not known until more text comes (None, never when
        ``final``)."""
        return False

    def step(self, final: bool) -> None:
        while True:
            if self.region is None:
                pos, marker = cut(self.buf, self.opens, final)
                self.sink.content.write(self.buf[:pos])
                self.buf = self.buf[pos + len(marker or ""):]
                if marker is None:
                    return
                kept = self.kept(marker, final)
                if kept is None:  # judged once more text comes
                    self.buf = marker + self.buf
                    return
                if kept:
                    self.sink.content.write(marker)
                    self.sink.note(f"{marker} around no tool call; kept as content")
                    continue
                self.region = self.open(marker)  # None: a marker that only separates calls
                continue
            pos, marker = cut(self.buf, self.closes, final)
            text, self.buf = self.buf[:pos], self.buf[pos + len(marker or ""):]
            rest = self.region.feed(text)
            if rest is not None:  # the region ended by itself
                self.region, self.buf = None, rest + self.buf
                continue
            if marker is None:
                if final:
                    self.region.close("")
                    self.region = None
                return
            self.region.close(marker)
            self.region = None


class SectionFormat(RegionFormat):
    """Calls each opened by :attr:`call_begin`, grouped between the :attr:`section` markers (DeepSeek's, Kimi-K2's).

    The section markers are markup only around calls: a begin that no call follows (after whitespace) and an end
    with no call since the last one are the model's text, kept as written (SGLang's Kimi-K2 detector gives
    such text back verbatim too). A begin waits for what follows it, as a marker's prefix does.
    """

    call_begin: str
    section: tuple[str, str]

    def __init__(self, sink: Sink):
        super().__init__(sink)
        self.calls_since_end = False

    def kept(self, marker: str, final: bool) -> bool | None:
        begin, end = self.section
        if marker == self.call_begin:
            self.calls_since_end = True
        elif marker == begin:
            lead = self.buf.lstrip(WS)
            if not lead.startswith(self.call_begin):
                return None if not final and self.call_begin.startswith(lead) else True
        elif marker == end:
            grouped, self.calls_since_end = self.calls_since_end, False
            return not grouped
        return False
