"""``<think>...</think>`` at the start of an answer: reasoning, split off before tool calls are parsed.

Qwen3, DeepSeek-R1 and GLM-4.5 open the block themselves; QwQ's generation
prompt already ends with ``<think>\\n``, so its answers start inside the block
(``opened``). Newlines just inside the block and right after it are dropped,
as Qwen3's template drops them when it writes the reasoning back.
"""
from __future__ import annotations

from .base import Format, cut
from .sink import WS, Sink

OPEN, CLOSE = "<think>", "</think>"


class ThinkSplitter:
    """Feeds reasoning to the sink's reasoning channel and the rest of the answer to ``downstream``."""

    def __init__(self, sink: Sink, downstream: Format, opened: bool):
        self.sink = sink
        self.downstream = downstream
        self.state = "think" if opened else "start"  # start (is there a block?), think, answer
        self.had_block = opened
        self.buf = ""
        sink.reasoning.drop = "\n"

    def feed(self, text: str) -> None:
        self.buf += text
        self._step(final=False)

    def finish(self) -> None:
        self._step(final=True)
        if self.state == "think":
            self.sink.reasoning.boundary("\n")
            self.sink.note("the output ends inside <think> (no </think>): all of it is reasoning")
        self.downstream.finish()

    def _step(self, final: bool) -> None:
        if self.state == "start":
            head = self.buf.lstrip(WS)
            if head.startswith(OPEN):
                self.buf, self.state, self.had_block = head[len(OPEN):], "think", True
            elif OPEN.startswith(head) and not final:
                return
            else:
                self.state = "answer"
        if self.state == "think":
            pos, marker = cut(self.buf, (CLOSE,), final)
            self.sink.reasoning.write(self.buf[:pos])
            self.buf = self.buf[pos + len(marker or ""):]
            if marker is None:
                return
            self.sink.reasoning.boundary("\n")
            self.sink.content.drop = "\n"
            self.state = "answer"
        while True:
            pos, marker = cut(self.buf, (CLOSE,), final)
            self.downstream.feed(self.buf[:pos])
            self.buf = self.buf[pos + len(marker or ""):]
            if marker is None:
                return
            hint = "" if self.had_block else " (if the prompt opened the block, pass prompt_opened=True)"
            self.sink.note(f"{CLOSE} outside a reasoning block; kept as content{hint}")
            self.downstream.feed(marker)
