"""The remote backend's wire: a completions request's server-sent events, and the cache counts in them."""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping

import httpx

from ..errors import BackendError


def events(client: httpx.Client, url: str, body: dict, headers: Mapping[str, str],
           cancelled: threading.Event) -> Iterator[dict | None]:
    """The server's SSE events as dicts; None once cancelled (closing the stream aborts the request).

    Every failure is a :class:`BackendError` naming ``url``: an HTTP error status with the server's
    message, no connection, a timeout, and a connection that breaks after the answer started (the
    server went down mid-stream), which says so.
    """
    started = False
    try:
        with client.stream("POST", url, json=body, headers=dict(headers)) as response:
            if response.status_code >= 400:
                text = response.read().decode("utf-8", "replace").strip()
                raise BackendError(f"{url} answered HTTP {response.status_code}: {text[:500] or response.reason_phrase}",
                                   url=url, status=response.status_code)
            started = True
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
                    event = json.loads(data)
                except json.JSONDecodeError:
                    raise BackendError(f"{url} sent a stream event that is not JSON: {data[:200]!r}", url=url,
                                       status=response.status_code) from None
                if isinstance(event, dict) and "error" in event and not event.get("choices"):
                    # an error after the answer started comes as an event (vLLM, lmchat serve)
                    raise BackendError(f"{url} failed mid-stream: {_message(event['error'])}", url=url,
                                       status=response.status_code)
                yield event
    except httpx.TimeoutException as exc:
        raise BackendError(f"{url} did not answer in time ({type(exc).__name__})", url=url) from exc
    except httpx.TransportError as exc:
        reason = str(exc) or type(exc).__name__
        if started:  # the server answered, then the connection broke: it died or was restarted
            raise BackendError(f"the connection to {url} broke mid-stream ({reason}): the server went away",
                               url=url) from exc
        raise BackendError(f"cannot reach {url}: {reason} (is the server running?)", url=url) from exc


def _message(error) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)[:500]
    return str(error)[:500]


def counts(event: dict) -> dict | None:
    """prefilled/reused from llama.cpp's ``timings`` or OpenAI-style ``usage`` (vLLM: cached_tokens).

    llama-cpp-python's server reports neither in a stream: its turns show 0/0.
    """
    timings = event.get("timings") or {}
    if "prompt_n" in timings:
        return {"prefilled": timings["prompt_n"], "reused": timings.get("cache_n", 0)}
    usage = event.get("usage") or {}
    if usage.get("prompt_tokens") is None:
        return None
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {"prefilled": usage["prompt_tokens"] - cached, "reused": cached}
