"""A deterministic, instant backend for tests and template debugging.

It answers ``echo: <the last user message>`` (``prefix`` changes the first
word), streamed piece by piece: tokens when a tokenizer is given (then
``max_new_tokens`` counts ids), else words (``max_new_tokens`` counts words).
Stop words, ``max_new_tokens`` and :meth:`cancel` behave as in a real engine,
and ``prefilled``/``reused`` are what a stateful engine would report: it
remembers what it "holds" for each session and reuses the longest prefix the
new context shares with it.
"""
from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..stops import StopMatcher
from ..session.tokens import codec_for
from .base import Chunk, GenerationRequest


class EchoBackend:
    """``delay`` (seconds per piece) simulates generation speed, e.g. to test cancellation or a UI;
    ``model`` is the model name it stands for."""

    name = "echo"

    def __init__(self, tokenizer: Any = None, prefix: str = "echo: ", delay: float = 0.0, model: str = "echo"):
        self.model_id = model  # stands for a model name: two echo "engines" keep their sessions apart
        self.tokenizer = tokenizer
        self.codec = codec_for(tokenizer) if tokenizer is not None else None
        self.prefix = prefix
        self.delay = delay
        self._held: dict[str, tuple | str] = {}  # session id -> the ids (or characters) it holds
        self._running: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def reply(self, request: GenerationRequest) -> str:
        """The full answer (before stop words and ``max_new_tokens`` cut it)."""
        users = [m for m in request.messages if m.get("role") == "user"]
        if not users:  # a request built without messages: echo what the engine was handed
            return self.prefix + request.delta.text
        content = users[-1].get("content")
        return self.prefix + (content if isinstance(content, str) else json.dumps(content, ensure_ascii=False))

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        sid, params = request.session_id, request.params
        # what a stateful engine holds: ids with a tokenizer, else characters
        context = request.context if request.context_ids is None else tuple(request.context_ids)
        cancelled = threading.Event()
        with self._lock:
            held = context[:0] if request.delta.reset else self._held.get(sid, context[:0])
            self._running[sid] = cancelled
        reused = _common_prefix(held, context)
        matcher = StopMatcher(params.stop, stop_ids=self._stop_ids(params.stop))
        finish, text, kept, answer = "stop", "", 0, []
        try:
            for n, piece in enumerate(self._pieces(self.reply(request))):
                if cancelled.is_set():
                    finish = "cancelled"
                    break
                if n >= params.max_new_tokens:
                    finish = "length"
                    break
                if self.delay:
                    time.sleep(self.delay)
                result = matcher.feed_ids(piece, self.codec.decode) if self.codec else matcher.feed(piece)
                if result.stopped:
                    text = result.text
                    break
                answer.append(result.text)
                new = matcher.kept_ids[kept:] if self.codec else []
                kept += len(new)
                if result.text or new:
                    yield Chunk(text=result.text, token_ids=tuple(new))
            text += matcher.finish()
            answer.append(text)
            generated = tuple(matcher.kept_ids) if self.codec else "".join(answer)
            with self._lock:
                self._held[sid] = context + generated
            yield Chunk(
                text=text, token_ids=tuple(matcher.kept_ids[kept:]), finish_reason=finish,
                stop=matcher.stop if finish == "stop" else None, prefilled=len(context) - reused, reused=reused,
            )
        finally:
            with self._lock:
                if self._running.get(sid) is cancelled:
                    del self._running[sid]

    def _pieces(self, text: str) -> list:
        if self.codec is not None:
            return [[i] for i in self.codec.encode_text(text, at_start=False)]
        return re.findall(r"\s*\S+\s*|\s+", text)  # words with their spaces: they join back to the text

    def _stop_ids(self, stops) -> list[int]:
        return [self.codec.special[w] for w in stops if w in self.codec.special] if self.codec else []

    def cancel(self, session_id: str) -> None:
        with self._lock:
            event = self._running.get(session_id)
        if event is not None:
            event.set()

    def drop(self, session_id: str) -> None:
        with self._lock:
            self._held.pop(session_id, None)

    def close(self) -> None:
        with self._lock:
            self._held.clear()


def _common_prefix(a, b) -> int:
    """Length of the longest common prefix of two sequences (as :meth:`KVStore.reuse` finds it)."""
    n = max(min(len(a), len(b) - 1), 0)  # the last element is always prefilled, for its logits
    if a[:n] == b[:n]:
        return n
    return next(i for i in range(n) if a[i] != b[i])
