"""A failure the server does not expect (a bug; an engine failing with an exception of its own) is answered like
any other: 500 ``internal_error`` in OpenAI's shape, and nothing escapes the app once it answered. Before, Starlette
answered the 500 and raised the exception again, uvicorn closed the connection of an app that raised, and the
client's next request on it was reset; a Responses stream that broke mid-answer was cut off the same way, with no
``error`` event. (The real process's connection is checked by tests/test_responses_store_corrupt.py and
tests/test_responses_truncation.py on the failures the issue found.)"""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("fastapi")

from lmchat.backends.echo import EchoBackend  # noqa: E402
from lmchat.manager import SessionManager, TurnRequest  # noqa: E402
from lmchat.serve.interactive import _lines as interactive_lines  # noqa: E402
from lmchat.serve.responses_sse import response_events  # noqa: E402
from lmchat.serve.sse import Meta, chat_events, completion_events  # noqa: E402


def test_an_unexpected_exception_is_answered_and_goes_no_further(memory_app):
    app = memory_app.http.app

    async def broken() -> None:
        raise ValueError("a bug")

    app.router.add_api_route("/v1/test-broken", broken)  # this module's app only
    # the TestClient raises what the app lets through: before, the ValueError, after its 500 was sent
    r = memory_app.http.get("/v1/test-broken")
    assert r.status_code == 500, r.text
    assert r.json()["error"] == {"message": "internal error: ValueError", "type": "server_error", "param": None,
                                 "code": "internal_error"}
    assert memory_app.http.get("/v1/models").status_code == 200


class DyingEngine(EchoBackend):
    """Echo whose engine fails mid-answer with an exception of its own (not lmchat's BackendError)."""

    async def agenerate(self, request):
        n = 0
        async for chunk in super().agenerate(request):
            if n == 2:
                raise RuntimeError("the engine died")
            n += 1
            yield chunk


def test_streams_whose_engine_dies_end_with_an_error_event():
    mgr = SessionManager(DyingEngine(), template="qwen2.5")
    sid = mgr.create("s", extra={"kind": "responses", "format": 2})

    async def events() -> list[str]:
        turn = await mgr.astream_turn(TurnRequest(sid, [{"role": "user", "content": "one two three four five"}],
                                                  kind="responses")).start()
        base = {"id": "resp_x_0", "object": "response", "status": "in_progress", "output": []}
        return [e async for e in response_events(turn, base, sid=sid, serial=1, parse=True,
                                                 finish=lambda result, output: base)]

    async def lines(chat: bool) -> list[str]:
        turn = await mgr.astream_turn(TurnRequest(plain, [{"role": "user", "content": "one two three four"}])).start()
        meta = Meta("x", "chat.completion.chunk" if chat else "text_completion", 0, "m")
        if chat:
            return [line async for line in chat_events(turn, meta, parser=turn.reading.stream(), include_usage=True,
                                                       count=lambda c, i: c)]
        return [line async for line in completion_events(turn, meta, include_usage=True, count=lambda c, i: c)]

    async def interactive() -> list[str]:
        turn = await mgr.astream_turn(TurnRequest(plain, [{"role": "user", "content": "one two three four"}])).start()
        return [line async for line in interactive_lines(mgr, plain, None, turn, end=True)]

    plain = mgr.create("plain")
    try:
        sent = asyncio.run(events())
        chat, completion = asyncio.run(lines(True)), asyncio.run(lines(False))
        lmdeploy = asyncio.run(interactive())
        assert mgr.get(plain) is not None  # a failed turn ends nothing, interactive_mode false or not
    finally:
        mgr.close()
    kinds = [e.split("\n", 1)[0] for e in sent]
    assert kinds[:2] == ["event: response.created", "event: response.in_progress"]
    assert kinds[-2:] == ["event: error", "event: response.failed"], kinds
    assert '"code": "internal_error"' in sent[-2] and '"status": "failed"' in sent[-1]
    for stream in (chat, completion, lmdeploy):  # chat completions', completions', interactive: an error line last
        assert '"code": "internal_error"' in stream[-1] and "[DONE]" not in "".join(stream), stream

