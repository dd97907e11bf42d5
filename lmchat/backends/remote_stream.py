"""The remote backend's wire: a completions request's server-sent events, and the cache counts in them."""
from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Generator, Iterator, Mapping
from typing import TypedDict

import httpx

from ..errors import BackendError
from ..jsontypes import JSONObject
from .cancel import Flag


def events(client: httpx.Client, url: str, body: JSONObject, headers: Mapping[str, str],
           cancelled: Flag) -> Generator[JSONObject | None, None, None]:
    """The server's SSE events as dicts; None once cancelled (closing the stream aborts the request).

    Every failure is a :class:`BackendError` naming ``url``: an HTTP error status with the server's
    message, no connection, a timeout, and a connection that breaks after the answer started (the
    server went down mid-stream), which says so.
    """
    call = _Call(url)
    with call.failures(), client.stream("POST", url, json=body, headers=dict(headers)) as response:
        if response.status_code >= 400:
            _refused(url, response.status_code, response.read(), response.reason_phrase)
        call.started = True
        for line in response.iter_lines():
            item = _item(url, line, response.status_code, cancelled)
            if item is _DONE:
                return
            if item is not _SKIP:
                yield item
                if item is None:  # cancelled: the caller closes the stream
                    return


async def aevents(client: httpx.AsyncClient, url: str, body: JSONObject, headers: Mapping[str, str],
                  cancelled: Flag) -> AsyncGenerator[JSONObject | None, None]:
    """:func:`events` over an asynchronous client."""
    call = _Call(url)
    with call.failures():
        async with client.stream("POST", url, json=body, headers=dict(headers)) as response:
            if response.status_code >= 400:
                _refused(url, response.status_code, await response.aread(), response.reason_phrase)
            call.started = True
            async for line in response.aiter_lines():  # the loop of events(), asynchronous
                item = _item(url, line, response.status_code, cancelled)
                if item is _DONE:
                    return
                if item is not _SKIP:
                    yield item
                    if item is None:
                        return


_DONE: JSONObject = {}  # the end of the stream (`data: [DONE]`)
_SKIP: JSONObject = {}  # a line that is no event: a comment, an event name, a keep-alive


def _item(url: str, line: str, status: int, cancelled: Flag) -> JSONObject | None:
    """What one SSE line gives: its event, None once cancelled, :data:`_DONE` or :data:`_SKIP`."""
    if cancelled.is_set():
        return None
    if not line.startswith("data:"):
        return _SKIP
    data = line[5:].strip()
    if data == "[DONE]":
        return _DONE
    try:
        event = json.loads(data)
    except json.JSONDecodeError:
        raise BackendError(f"{url} sent a stream event that is not JSON: {data[:200]!r}", url=url,
                           status=status) from None
    if not isinstance(event, dict):
        raise BackendError(f"{url} sent a stream event that is not a JSON object: {data[:200]!r}", url=url,
                           status=status)
    if "error" in event and not event.get("choices"):
        # an error after the answer started comes as an event (vLLM, lmchat serve)
        raise BackendError(f"{url} failed mid-stream: {_message(event['error'])}", url=url, status=status)
    return event


class _Call:
    """One request's transport failures as :class:`BackendError`s (``started``: the answer had begun)."""

    def __init__(self, url: str):
        self.url, self.started = url, False

    @contextlib.contextmanager
    def failures(self) -> Iterator[None]:
        url = self.url
        try:
            yield
        except httpx.TimeoutException as exc:
            raise BackendError(f"{url} did not answer in time ({type(exc).__name__})", url=url) from exc
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            if self.started:  # the server answered, then the connection broke: it died or was restarted
                raise BackendError(f"the connection to {url} broke mid-stream ({reason}): the server went away",
                                   url=url) from exc
            raise BackendError(f"cannot reach {url}: {reason} (is the server running?)", url=url) from exc


def _refused(url: str, status: int, body: bytes, reason: str) -> None:
    text = body.decode("utf-8", "replace").strip()
    raise BackendError(f"{url} answered HTTP {status}: {text[:500] or reason}", url=url, status=status)


def _message(error: object) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)[:500]
    return str(error)[:500]


class Counts(TypedDict):
    """A stream's prompt counts, as the last :class:`~lmchat.backends.base.Chunk` carries them."""

    prefilled: int
    reused: int


def counts(event: JSONObject) -> Counts | None:
    """prefilled/reused from llama.cpp's ``timings`` or OpenAI-style ``usage`` (vLLM: cached_tokens); a count
    that is not a number reads as 0.

    llama-cpp-python's server reports neither in a stream: its turns show 0/0.
    """
    timings = event.get("timings")
    if isinstance(timings, dict) and "prompt_n" in timings:
        return {"prefilled": _count(timings["prompt_n"]), "reused": _count(timings.get("cache_n", 0))}
    usage = event.get("usage")
    if not isinstance(usage, dict) or usage.get("prompt_tokens") is None:
        return None
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens") if isinstance(details, dict) else 0)
    return {"prefilled": _count(usage["prompt_tokens"]) - cached, "reused": cached}


def _count(value: object) -> int:
    return value if isinstance(value, int) else 0
