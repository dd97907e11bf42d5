"""A deterministic, instant backend for tests and template debugging.

It answers ``echo: <the last user message>`` (``prefix`` changes the first
word), streamed piece by piece: tokens when a tokenizer is given (then
``max_new_tokens`` counts ids), else words (``max_new_tokens`` counts words).
Stop words, ``max_new_tokens`` and :meth:`cancel` behave as in a real engine,
and ``prefilled``/``reused`` are what a stateful engine would report: it
keeps, per session, how much it holds, applies each delta's ``discard`` and
extends it with the delta; what the session holds beyond that (the end
marker of an answer, which a real engine samples but never feeds) is
prefilled with the delta, and a backend that holds more than the session
says rebuilds from the whole prompt.
"""
from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import AsyncGenerator, Iterator, Sequence
from typing import Any, Literal, overload

from ..session.tokens import codec_for
from ..session.vocab import Tokenizer
from ..stops import StopMatcher
from .base import Chunk, GenerationRequest
from .cancel import Cancels


class EchoBackend:
    """``delay`` (seconds per piece) simulates generation speed, e.g. to test cancellation or a UI;
    ``model`` is the model name it stands for."""

    name = "echo"

    def __init__(self, tokenizer: Tokenizer | None = None, prefix: str = "echo: ", delay: float = 0.0,
                 model: str = "echo"):
        self.model_id = model  # stands for a model name: two echo "engines" keep their sessions apart
        self.tokenizer = tokenizer
        self.codec = codec_for(tokenizer) if tokenizer is not None else None
        self.prefix = prefix
        self.delay = delay
        self._held: dict[str, int] = {}  # session id -> how much it holds (ids with a tokenizer, else characters)
        self._lock = threading.Lock()
        self._cancels = Cancels()

    def reply(self, request: GenerationRequest) -> str:
        """The full answer (before stop words and ``max_new_tokens`` cut it)."""
        return self.prefix + (request.last_user or request.delta.text)

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        if not self.delay:
            yield from self._answer(request, waits=False)
            return
        for chunk in self._answer(request, waits=True):
            if chunk is None:
                time.sleep(self.delay)
            else:
                yield chunk

    async def agenerate(self, request: GenerationRequest) -> AsyncGenerator[Chunk, None]:
        """:meth:`generate` for an asyncio caller (the session manager's turns run on the loop then)."""
        for chunk in self._answer(request, waits=bool(self.delay)):
            if chunk is None:
                await asyncio.sleep(self.delay)
            else:
                yield chunk

    @overload
    def _answer(self, request: GenerationRequest, waits: Literal[False]) -> Iterator[Chunk]: ...

    @overload
    def _answer(self, request: GenerationRequest, waits: bool) -> Iterator[Chunk | None]: ...

    def _answer(self, request: GenerationRequest, waits: bool) -> Iterator[Chunk | None]:
        """The answer's chunks; ``waits``: with None before each piece, where the caller waits ``delay``."""
        sid, params, delta = request.session_id, request.params, request.delta
        size = len(delta.token_ids or ()) if self.codec is not None else len(delta.text)
        with self._lock:
            held = 0 if delta.reset else self._held.get(sid, 0)
            if delta.discard:
                held = max(held - delta.discard[1], 0)
            if request.held is None:
                reused, prefilled = 0, size
            elif held <= request.held:  # what it lacks (an end marker it never fed) comes before the delta
                reused, prefilled = held, request.held - held + size
            else:  # out of step: a real engine rebuilds from the whole prompt
                prompt = request.prompt()
                reused, prefilled = 0, len(prompt.ids) if prompt.ids is not None else len(prompt.text)
            self._held[sid] = reused + prefilled
        matcher = StopMatcher(params.stop, stop_ids=self._stop_ids(params.stop))
        finish, text, kept, generated = "stop", "", 0, 0
        with self._cancels.running(sid) as cancelled:
            for n, piece in enumerate(self._pieces(self.reply(request))):
                if cancelled.is_set():
                    finish = "cancelled"
                    break
                if n >= params.max_new_tokens:
                    finish = "length"
                    break
                if waits:
                    yield None
                result = matcher.feed_ids(piece, self.codec.decode) if self.codec else matcher.feed(piece)
                if result.stopped:
                    text = result.text
                    break
                new = matcher.kept_ids[kept:] if self.codec else []
                kept += len(new)
                generated += len(new) if self.codec else len(result.text)
                if result.text or new:
                    yield Chunk(text=result.text, token_ids=tuple(new))
            text += matcher.finish()
            generated += len(matcher.kept_ids) - kept if self.codec else len(text)
            if finish == "stop" and matcher.stop:  # the engine holds the stop it emitted
                generated += self._size(matcher.stop)
            with self._lock:
                self._held[sid] = self._held.get(sid, 0) + generated
            yield Chunk(
                text=text, token_ids=tuple(matcher.kept_ids[kept:]), finish_reason=finish,
                stop=matcher.stop if finish == "stop" else None, prefilled=prefilled, reused=reused,
            )

    def _pieces(self, text: str) -> list[Any]:  # Any: lists of ids with a codec, else words (fed to either)
        if self.codec is not None:
            return [[i] for i in self.codec.encode_text(text, at_start=False)]
        return re.findall(r"\s*\S+\s*|\s+", text)  # words with their spaces: they join back to the text

    def _size(self, stop: str) -> int:
        """What a stop word takes in the context: one marker id, its text's ids, or its characters."""
        if self.codec is None:
            return len(stop)
        return 1 if stop in self.codec.special else len(self.codec.encode_text(stop, at_start=False))

    def _stop_ids(self, stops: Sequence[str]) -> list[int]:
        return [self.codec.special[w] for w in stops if w in self.codec.special] if self.codec else []

    def cancel(self, session_id: str) -> None:
        self._cancels.cancel(session_id)

    def drop(self, session_id: str) -> None:
        with self._lock:
            self._held.pop(session_id, None)

    def close(self) -> None:
        with self._lock:
            self._held.clear()
