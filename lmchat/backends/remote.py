"""Any OpenAI-compatible ``/v1/completions`` server (vLLM, LMDeploy, llama.cpp's server, ``lmchat serve``).

Such servers are stateless per request, so each turn sends the session's
whole prompt (``request.prompt()``, rendered by lmchat, never re-templated by
the server); their prefix caches do the reuse. The session id goes along as
the ``user`` field and an ``X-Session-Id`` header, for routers that pin a
session to the replica holding its cache. ``add_special_tokens: false`` keeps
vLLM from putting a second BOS before a prompt that already starts with one.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx

from ..errors import BackendError
from ..stops import StopMatcher
from .base import Chunk, GenerationRequest
from .cancel import Cancels


class RemoteBackend:
    """``base_url`` like ``http://host:8000`` or ``http://host:8000/v1``; ``tokenizer`` is optional
    (give the served model's to let sessions count tokens against ``session_len``)."""

    name = "remote"

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 600.0,
        tokenizer: Any = None,
    ):
        base = base_url.rstrip("/")
        self.url = base + ("/completions" if base.endswith("/v1") else "/v1/completions")
        self.model = model
        self.model_id = f"{model or 'default'}@{base}"
        self.tokenizer = tokenizer
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(headers=headers, timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)))
        self._cancels = Cancels()

    def payload(self, request: GenerationRequest) -> dict:
        """The JSON body sent for ``request``."""
        p = request.params
        body: dict[str, Any] = {
            "prompt": request.prompt().text,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": p.max_new_tokens,
            "temperature": max(p.temperature, 0.0),
            "top_p": p.top_p,
            "stop": list(p.stop),
            "user": request.session_id,
            "add_special_tokens": False,
        }
        extras = {"model": self.model, "top_k": p.top_k, "seed": p.seed}
        body.update({k: v for k, v in extras.items() if v is not None})
        if p.repetition_penalty != 1.0:
            body["repetition_penalty"] = p.repetition_penalty
        return body

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        with self._cancels.running(request.session_id) as cancelled:
            yield from self._stream(request, cancelled)

    def _stream(self, request: GenerationRequest, cancelled) -> Iterator[Chunk]:
        # the server applies the stop words too; matching them here as well names the one that fired
        # and holds to lmchat's semantics on servers that cap or ignore them
        matcher = StopMatcher(request.params.stop)
        finish, counts, server_stop = "stop", {}, None
        events = self._events(request, cancelled)
        try:
            for event in events:
                if event is None:
                    finish = "cancelled"
                    break
                counts = _counts(event) or counts
                for choice in event.get("choices") or ():
                    result = matcher.feed(choice.get("text") or "")
                    if result.text:
                        yield Chunk(text=result.text)
                    if choice.get("finish_reason"):
                        finish = "length" if choice["finish_reason"] == "length" else "stop"
                        server_stop = choice.get("stop_reason")
                if matcher.stopped:
                    break
            tail = matcher.finish()
            if matcher.stopped:
                finish = "stop"
            stop = None
            if finish == "stop":
                stop = matcher.stop or (server_stop if isinstance(server_stop, str) else None)
            yield Chunk(text=tail, finish_reason=finish, stop=stop, **counts)
        finally:
            events.close()  # closes the HTTP stream when we stop first (stop word, cancel, consumer gone)

    def _events(self, request: GenerationRequest, cancelled: threading.Event) -> Iterator[dict | None]:
        """The server's SSE events as dicts; None once cancelled (closing the stream aborts the request)."""
        url = self.url
        try:
            with self._client.stream(
                "POST", url, json=self.payload(request), headers={"X-Session-Id": request.session_id}
            ) as response:
                if response.status_code >= 400:
                    body = response.read().decode("utf-8", "replace").strip()
                    raise BackendError(
                        f"{url} answered HTTP {response.status_code}: {body[:500] or response.reason_phrase}",
                        url=url, status=response.status_code,
                    )
                for line in response.iter_lines():
                    if cancelled.is_set():
                        yield None
                        return
                    if not line.startswith("data:"):
                        continue  # SSE comments, event names, keep-alives
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    try:
                        yield json.loads(data)
                    except json.JSONDecodeError:
                        raise BackendError(f"{url} sent a stream event that is not JSON: {data[:200]!r}", url=url,
                                           status=response.status_code) from None
        except httpx.TimeoutException as exc:
            raise BackendError(f"{url} did not answer in time ({type(exc).__name__})", url=url) from exc
        except httpx.TransportError as exc:
            raise BackendError(f"cannot reach {url}: {exc or type(exc).__name__} (is the server running?)",
                               url=url) from exc

    def cancel(self, session_id: str) -> None:
        self._cancels.cancel(session_id)

    def drop(self, session_id: str) -> None:
        """Nothing to forget locally: the server's prefix cache evicts on its own."""

    def close(self) -> None:
        self._client.close()


def _counts(event: dict) -> dict | None:
    """prefilled/reused from llama.cpp's ``timings`` or OpenAI-style ``usage`` (vLLM: cached_tokens)."""
    timings = event.get("timings") or {}
    if "prompt_n" in timings:
        return {"prefilled": timings["prompt_n"], "reused": timings.get("cache_n", 0)}
    usage = event.get("usage") or {}
    if usage.get("prompt_tokens") is None:
        return None
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {"prefilled": usage["prompt_tokens"] - cached, "reused": cached}
