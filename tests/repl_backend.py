"""A deterministic stateful backend for the REPL tests (a real engine, minus the model).

It keeps per session the text (and, with a tokenizer, the ids) an engine would
hold in its KV cache and checks every request against it: a delta that does
not reset must extend exactly what it holds to ``request.prompt()`` (after
dropping ``delta.discard``), and ``request.held`` must be what it holds — the
session invariant seen from the engine. It
answers "You said: <last user message>" a few characters per chunk (only the
rest of it when the context already ends with its start: /continue), ends
with its template's end marker, and honours ``max_new_tokens`` (counted in
chunks), ``cancel`` and ``drop``. ``$REPL_TEST_DELAY`` (seconds per chunk)
makes it slow in a subprocess; ``$REPL_TEST_WARN`` makes it raise that Python warning on
every turn, as libraries do. ``$REPL_TEST_THREADS`` gives it a ``threads`` count, as an engine on the CPU
has, and ``$REPL_TEST_SLOWDOWN`` (``N:SECONDS``) makes every chunk from its N-th generation on take that long, as
a CPU other work takes over does.
"""
from __future__ import annotations

import os
import threading
import time
import warnings

from lmchat import get_template
from lmchat.backends.base import Chunk, GenerationRequest


class CacheBackend:
    name = "test-cache"

    def __init__(self, delay: float | None = None, chunk: int = 4, tokenizer=None, template_name: str = "qwen2.5"):
        self.delay = float(os.environ.get("REPL_TEST_DELAY", "0")) if delay is None else delay
        self.chunk = chunk
        self.tokenizer = tokenizer
        self.template_name = template_name
        self.eoa = get_template(template_name).eoa  # the end marker this engine's model emits
        self.codec = None
        if tokenizer is not None:
            from lmchat.session.tokens import codec_for

            self.codec = codec_for(tokenizer)
        self.held: dict[str, tuple[str, list[int]]] = {}
        self.requests: list[GenerationRequest] = []
        self.dropped: list[str] = []
        self.started = threading.Event()  # set once a chunk of a generation is out
        if os.environ.get("REPL_TEST_THREADS"):
            self.threads = int(os.environ["REPL_TEST_THREADS"])
        after, _, delay = os.environ.get("REPL_TEST_SLOWDOWN", "").partition(":")
        self.slowdown = (int(after), float(delay)) if delay else None
        self._cancel: set[str] = set()

    def _ids(self, text: str) -> list[int]:
        if self.codec is None:
            return []
        if text in self.codec.special:
            return [self.codec.special[text]]
        return self.codec.encode_text(text, at_start=False)

    def generate(self, request: GenerationRequest):
        if os.environ.get("REPL_TEST_WARN"):  # what libraries do (transformers' FutureWarnings)
            warnings.warn(os.environ["REPL_TEST_WARN"], FutureWarning, stacklevel=1)
        sid, delta = request.session_id, request.delta
        self.requests.append(request)
        delay = self.delay
        if self.slowdown and len(self.requests) >= self.slowdown[0]:
            delay = self.slowdown[1]
        self._cancel.discard(sid)
        self.started.clear()
        if delta.reset or delta.sequence_start:
            before, before_ids = "", []
        elif sid in self.held:
            before, before_ids = self.held[sid]
        else:
            raise AssertionError(f"a delta that does not reset, for session {sid} the engine holds nothing for")
        prompt = request.prompt()  # a test engine checks every request against the whole context
        if delta.discard:  # the session asks the engine to drop a range of what it holds (shift, rewind, reopen)
            start, count = delta.discard
            if self.codec is None:  # a text session counts characters
                before = before[:start] + before[start + count:]
            else:  # ids are checked below; the text kept is what the context has before the delta
                before_ids = before_ids[:start] + before_ids[start + count:]
                before = prompt.text[: len(prompt.text) - len(delta.text)]
        if before + delta.text != prompt.text:
            raise AssertionError(f"held + delta != context: {before + delta.text!r} vs {prompt.text!r}")
        if self.codec is not None and before_ids + list(delta.token_ids) != list(prompt.ids):
            raise AssertionError("held ids + delta ids != the context's ids")
        if request.held is not None and request.held != (len(before_ids) if self.codec else len(before)):
            raise AssertionError(f"request.held {request.held} is not what the engine holds")
        reply = f"You said: {request.last_user}"
        written = next((k for k in range(len(reply), 0, -1) if prompt.text.endswith(reply[:k])), 0)
        pieces = [reply[i:i + self.chunk] for i in range(written, len(reply), self.chunk)]
        finish, stop = "stop", self.eoa or None
        if len(pieces) > request.params.max_new_tokens:
            pieces, finish, stop = pieces[: request.params.max_new_tokens], "length", None
        text, ids = prompt.text, list(prompt.ids or ())
        for piece in pieces:
            if sid in self._cancel:
                finish, stop = "cancelled", None
                break
            time.sleep(delay)
            piece_ids = self._ids(piece)
            text, ids = text + piece, ids + piece_ids
            self.held[sid] = (text, ids)
            yield Chunk(text=piece, token_ids=tuple(piece_ids))
            self.started.set()
        self.held[sid] = (text + (stop or ""), ids + self._ids(stop or ""))
        yield Chunk(finish_reason=finish, stop=stop, prefilled=len(delta.token_ids or delta.text),
                    reused=len(before_ids or before))

    def cancel(self, session_id: str) -> None:
        self._cancel.add(session_id)

    def drop(self, session_id: str) -> None:
        self.dropped.append(session_id)
        self.held.pop(session_id, None)

    def close(self) -> None:
        self.held.clear()
