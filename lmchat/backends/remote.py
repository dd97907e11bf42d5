"""Any OpenAI-compatible ``/v1/completions`` server (vLLM, SGLang, llama.cpp's ``llama-server``,
llama-cpp-python's server, LMDeploy, ``lmchat serve``).

Such servers are stateless per request, so each turn sends the session's
whole prompt (``request.prompt()``, rendered by lmchat, never re-templated by
the server); their prefix caches do the reuse. The session id goes along as
the ``user`` field and an ``X-Session-Id`` header (more headers with
``session_headers``), for routers that pin a session to the replica holding
its cache.

The prompt goes as token ids or as text (``prompt_format``). A text prompt is
tokenized again by the server with special-token parsing on, so a user who
types ``<|im_end|>`` would forge a turn there; ids carry the session's own
encoding (markers as control ids, content as plain text) and are never parsed
again. ``'auto'`` sends ids when the backend has the served model's tokenizer
and the server accepts a prompt of ids (one probe of a one-token prompt), text
otherwise; :attr:`RemoteBackend.prompt_mode` says which. On the text path the
CLI gives sessions the ``'reject'`` injection policy (docs/backends.md).

A constraint on the answer (:mod:`lmchat.constraints`) goes to the server in the dialect the
``constraints`` option names, since servers differ on ``/v1/completions`` and one that does not know a
field ignores it (an unconstrained answer, silently): ``'response_format'`` (OpenAI's
``response_format``: vLLM, SGLang, ``lmchat serve``) for JSON and schemas; ``'llama.cpp'`` (llama.cpp's
``llama-server``: ``json_schema`` and ``grammar``) for those and GBNF grammars; ``'grammar'``
(llama-cpp-python's server, which takes only ``grammar`` there) for GBNF grammars; ``'none'`` (the
default: the server is unknown) for nothing. What the dialect cannot send is refused before the turn
(:meth:`RemoteBackend.check_constraint`).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence

import httpx

from ..constraints import Constraint
from ..errors import BackendError, ConfigError, ConstraintUnsupported
from ..jsontypes import JSONObject
from ..session.vocab import Tokenizer
from ..stops import StopMatcher
from .base import Chunk, GenerationRequest
from .cancel import Cancels
from .remote_stream import Counts, aevents, counts, events

log = logging.getLogger("lmchat.remote")

PROMPT_FORMATS = ("auto", "ids", "text")
#: answers to the probe that say nothing about the prompt's shape: ask again before the next request
_TRANSIENT = {408, 425, 429, 502, 503, 504}
#: the ``constraints`` dialects: the constraint kinds each sends (see the module's docstring)
CONSTRAINT_DIALECTS = {
    "none": (),
    "response_format": ("json_object", "json_schema"),
    "llama.cpp": ("json_object", "json_schema", "gbnf"),
    "grammar": ("gbnf",),
}


class RemoteBackend:
    """``base_url`` like ``http://host:8000`` or ``http://host:8000/v1``; ``tokenizer``: the served
    model's (sessions then count tokens and, with ``prompt_format`` ``'ids'`` or ``'auto'``, send ids);
    ``extra_body``: more fields for every request (e.g. llama.cpp's ``{"cache_prompt": false}``);
    ``constraints``: how the server takes a constraint on the answer (:data:`CONSTRAINT_DIALECTS`)."""

    name = "remote"

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 600.0,
        tokenizer: Tokenizer | None = None,
        prompt_format: str = "auto",
        session_headers: str | Sequence[str] = ("X-Session-Id",),
        extra_body: Mapping[str, object] | None = None,
        constraints: str = "none",
    ):
        if constraints not in CONSTRAINT_DIALECTS:
            raise ConfigError(f"{constraints!r} is not one of {', '.join(CONSTRAINT_DIALECTS)}", field="constraints")
        if prompt_format not in PROMPT_FORMATS:
            raise ConfigError(f"{prompt_format!r} is not one of {', '.join(PROMPT_FORMATS)}", field="prompt_format")
        if prompt_format == "ids" and tokenizer is None:
            raise ConfigError("'ids' needs the served model's tokenizer (--tokenizer)", field="prompt_format")
        base = base_url.rstrip("/")
        self.url = base + ("/completions" if base.endswith("/v1") else "/v1/completions")
        self.model = model
        self.model_id = f"{model or 'default'}@{base}"
        self.tokenizer = tokenizer
        self.prompt_format = prompt_format
        self.session_headers = (session_headers,) if isinstance(session_headers, str) else tuple(session_headers)
        self.extra_body = dict(extra_body or {})
        self.constraints = constraints
        #: why 'auto' settled on text (the server's answer to a prompt of ids), or None
        self.probe_result: str | None = None
        # True: ids; False: text; None: 'auto' not settled yet (the probe runs before the next request)
        self._ids: bool | None = {"ids": True, "text": False}.get(prompt_format) if tokenizer is not None else False
        self._probe_lock = threading.Lock()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(headers=headers, timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)))
        self._aclient: httpx.AsyncClient | None = None  # agenerate's, made on the loop that uses it
        self._aclient_loop: asyncio.AbstractEventLoop | None = None
        self._cancels = Cancels()

    # ------------------------------------------------------------------ the prompt's form
    @property
    def prompt_mode(self) -> str:
        """``'ids'`` or ``'text'``: what requests carry now, without asking the server (an ``'auto'``
        backend whose probe has not been answered yet sends text)."""
        return "ids" if self._ids else "text"

    def resolve_prompt_format(self) -> str:
        """:attr:`prompt_mode`, after probing the server once when ``prompt_format='auto'`` has a tokenizer.

        The probe asks for one token after a one-token prompt of ids: a 2xx answer means ids, a
        refusal (400, 422, or 500 as llama-cpp-python answers) text; 401/403/404 raise
        :class:`BackendError`; no answer, 429 or 503 leave it open (probed again before the next
        request, text meanwhile).
        """
        if self._ids is None:
            with self._probe_lock:
                if self._ids is None:
                    self._probe()
        return self.prompt_mode

    def _probe(self) -> None:
        from ..session.tokens import codec_for

        assert self.tokenizer is not None  # probed only while _ids is None, which needs a tokenizer (__init__)
        ids = codec_for(self.tokenizer).encode_text("Hello", at_start=True)[:1]
        body = {**self.extra_body, "prompt": ids, "max_tokens": 1, "temperature": 0.0, "stream": False}
        if self.model:
            body["model"] = self.model
        try:
            response = self._client.post(self.url, json=body)
        except httpx.HTTPError as exc:
            self.probe_result = f"no answer from {self.url} ({exc or type(exc).__name__}): probed again later"
            return
        status = response.status_code
        if status in (401, 403, 404):
            raise BackendError(f"{self.url} answered HTTP {status}: {_body(response)}", url=self.url, status=status)
        if status in _TRANSIENT:
            self.probe_result = f"{self.url} answered HTTP {status}: probed again later"
            return
        self._ids = 200 <= status < 300
        self.probe_result = None if self._ids else f"HTTP {status}: {_body(response)[:300]}"
        if not self._ids:
            log.info("%s refused a prompt of token ids (%s): prompts go as text", self.url, self.probe_result)

    def payload(self, request: GenerationRequest) -> JSONObject:
        """The JSON body sent for ``request``."""
        p = request.params
        prompt = request.prompt()
        if self._ids and prompt.ids is not None:
            sent: str | list[int] = list(prompt.ids)
        elif self.prompt_format == "ids":
            raise ConfigError(f"session {request.session_id} has no token ids: give it the backend's tokenizer",
                              field="prompt_format")
        else:
            sent = prompt.text
        body: JSONObject = {
            **self.extra_body,
            "prompt": sent,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": p.max_new_tokens,
            "temperature": max(p.temperature, 0.0),
            "top_p": p.top_p,
            "stop": list(p.stop),
            "user": request.session_id,
            # vLLM would put a second BOS before a text prompt that already starts with one
            "add_special_tokens": False,
            # llama.cpp's name; its servers default to 1.1, which would change lmchat's greedy answers
            "repeat_penalty": p.repetition_penalty,
        }
        extras = {"model": self.model, "top_k": p.top_k, "seed": p.seed}
        body.update({k: v for k, v in extras.items() if v is not None})
        if p.repetition_penalty != 1.0:
            body["repetition_penalty"] = p.repetition_penalty
        if p.constraint is not None:
            body.update(self._constraint_fields(p.constraint))
        return body

    # ------------------------------------------------------------------ constraints
    def check_constraint(self, constraint: Constraint) -> None:
        """Refuse a constraint the ``constraints`` dialect cannot send (:class:`~lmchat.backends.base.Constrains`):
        a server that does not know the field would answer unconstrained."""
        # a constraint's start after a reasoning block (``after``) is not sent: the upstream knows its model's
        # reasoning (lmchat serve, vLLM with a reasoning parser) and starts it there, or constrains it all
        if constraint.kind == "lark":  # a forced tool call's grammar: no dialect carries llguidance's Lark
            raise ConstraintUnsupported("the remote backend cannot force a tool call: no server dialect carries "
                                        "its grammar", field="tool_choice")
        if constraint.written:  # the server's grammar would start again after the text already written
            raise ConstraintUnsupported("the remote backend cannot continue an answer under a format: no server "
                                        "dialect starts a grammar past the text already written", field="format")
        if constraint.kind not in CONSTRAINT_DIALECTS[self.constraints]:
            what = "GBNF grammars" if constraint.kind == "gbnf" else "JSON constraints"
            raise ConstraintUnsupported(
                f"the remote backend sends no {what} with constraints={self.constraints!r}: set its constraints "
                f"option to how {self.url} takes them (response_format: vLLM, SGLang, lmchat serve; llama.cpp: "
                f"llama-server, JSON and GBNF; grammar: llama-cpp-python's server, GBNF only)",
                field="response_format")

    def _constraint_fields(self, constraint: Constraint) -> JSONObject:
        """The request fields that carry ``constraint`` in the server's dialect."""
        self.check_constraint(constraint)  # a request built without the turn's check (payload() called directly)
        if constraint.kind == "gbnf":
            return {"grammar": constraint.grammar}
        schema = constraint.schema_dict() if constraint.kind == "json_schema" else None
        if self.constraints == "llama.cpp":  # llama-server converts json_schema to a grammar itself
            return {"json_schema": schema if schema is not None else {"type": "object"}}
        if schema is None:
            return {"response_format": {"type": "json_object"}}
        # OpenAI's rule for the name (1 to 64 of [A-Za-z0-9_-]), which strict servers enforce
        name = re.sub(r"[^A-Za-z0-9_-]", "_", constraint.name)[:64] or "answer"
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": name, "schema": schema, "strict": True}}}

    # ------------------------------------------------------------------ generation
    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        self.resolve_prompt_format()
        with self._cancels.running(request.session_id) as cancelled:
            answer = _Answer(self.url, request.params.stop)
            stream = events(self._client, self.url, self.payload(request), self._headers_for(request), cancelled)
            try:
                for event in stream:
                    if event is None:
                        answer.finish = "cancelled"
                        break
                    yield from answer.feed(event)
                    if answer.stopped:
                        break
                yield answer.last()
            finally:
                stream.close()  # closes the HTTP stream when we stop first (stop word, cancel, consumer gone)

    async def agenerate(self, request: GenerationRequest) -> AsyncGenerator[Chunk, None]:
        """:meth:`generate` over an asynchronous client, for the session manager's turns on the event loop
        (the one probe of ``'auto'`` runs in a worker thread)."""
        if self._ids is None:
            await asyncio.to_thread(self.resolve_prompt_format)
        with self._cancels.running(request.session_id) as cancelled:
            answer = _Answer(self.url, request.params.stop)
            stream = aevents(self._loop_client(), self.url, self.payload(request), self._headers_for(request),
                             cancelled)
            try:
                async for event in stream:
                    if event is None:
                        answer.finish = "cancelled"
                        break
                    for chunk in answer.feed(event):
                        yield chunk
                    if answer.stopped:
                        break
                yield answer.last()
            finally:
                await stream.aclose()

    def _headers_for(self, request: GenerationRequest) -> dict[str, str]:
        return {name: request.session_id for name in self.session_headers}

    def _loop_client(self) -> httpx.AsyncClient:
        """The asynchronous client of the running loop (a client's connections belong to one loop)."""
        loop = asyncio.get_running_loop()
        if self._aclient is None or self._aclient_loop is not loop:
            self._aclient = httpx.AsyncClient(headers=self._client.headers, timeout=self._client.timeout)
            self._aclient_loop = loop
        return self._aclient

    def cancel(self, session_id: str) -> None:
        self._cancels.cancel(session_id)

    def drop(self, session_id: str) -> None:
        """Nothing to forget locally: the server's prefix cache evicts on its own."""

    def close(self) -> None:
        self._client.close()
        client, loop = self._aclient, self._aclient_loop
        self._aclient = self._aclient_loop = None
        if client is not None and loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop stopped meanwhile: its sockets go with it
                asyncio.run_coroutine_threadsafe(client.aclose(), loop)


class _Answer:
    """What a stream of completion events says, for both streams: the answer's chunks, then its last chunk.

    The server applies the stop words too; matching them here as well names the one that fired and
    holds to lmchat's semantics on servers that cap or ignore them.
    """

    def __init__(self, url: str, stop: Sequence[str]):
        self.url = url
        self.matcher = StopMatcher(stop)
        self.finish: str | None = None
        self.found: Counts | None = None
        self.server_stop: object = None

    @property
    def stopped(self) -> bool:
        return self.matcher.stopped

    def feed(self, event: JSONObject) -> list[Chunk]:
        self.found = counts(event) or self.found
        chunks = []
        choices = event.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                raise BackendError(f"{self.url} sent a choice that is not a JSON object: {choice!r:.200}",
                                   url=self.url)
            result = self.matcher.feed(choice.get("text") or "")
            if result.text:
                chunks.append(Chunk(text=result.text))
            if choice.get("finish_reason"):
                self.finish = "length" if choice["finish_reason"] == "length" else "stop"
                self.server_stop = choice.get("stop_reason")
        return chunks

    def last(self) -> Chunk:
        tail = self.matcher.finish()
        finish = "stop" if self.matcher.stopped else self.finish
        if finish is None:
            # llama-cpp-python's server ends a stream this way when another request arrives
            # (--interrupt_requests): a cut answer must not be committed as a finished one
            raise BackendError(f"{self.url} ended the stream without a finish_reason (the answer was cut "
                               "short: another request interrupted it?)", url=self.url)
        stop = None
        if finish == "stop":
            stop = self.matcher.stop or (self.server_stop if isinstance(self.server_stop, str) else None)
        found = self.found or Counts(prefilled=0, reused=0)  # Chunk's own defaults
        return Chunk(text=tail, finish_reason=finish, stop=stop, prefilled=found["prefilled"], reused=found["reused"])


def _body(response: httpx.Response) -> str:
    return response.text.strip()[:500] or response.reason_phrase
