"""Slow clients against a real ``lmchat serve``: headers and each piece of a body have a deadline
(``--header-timeout``, ``--body-timeout``); a client past it is answered 408 or closed, the session it
aimed at is untouched, and a body that keeps coming within the deadline is served however long it takes.
Also the deadline helper itself, and the watch that notices a client leaving a request that runs long."""
from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

pytest.importorskip("fastapi")

from .serve_helpers import Server  # noqa: E402

SECONDS = 1.0
SID = "deadline-target"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    db = tmp_path_factory.mktemp("deadlines") / "s.db"
    s = Server("--template", "qwen2.5", "--store", f"sqlite:{db}", "--header-timeout", str(SECONDS),
               "--body-timeout", str(SECONDS))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    # no kept-alive connections: the server closes idle ones after the header deadline, and a request sent
    # just as it does would fail for a reason that is not the one under test
    with httpx.Client(base_url=server.url, timeout=30, limits=httpx.Limits(max_keepalive_connections=0)) as c:
        first = c.post("/v1/chat/interactive", json={"session_id": SID, "prompt": "hello", "interactive_mode": True})
        assert first.status_code == 200, first.text
        yield c


def stored(client) -> str:
    return client.get(f"/v1/sessions/{SID}/export").text


def connect(server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10 * SECONDS)


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a socket timeout fails the test)."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def head(path: str, length: int, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            f"content-length: {length}\r\n{extra}\r\n").encode()


def test_headers_that_never_end_are_cut_off(server, client):
    sock = connect(server)
    started = time.monotonic()
    sock.sendall(b"POST /v1/chat/interactive HTTP/1.1\r\nhost: x\r\n")  # and nothing more
    assert read_all(sock) == b""  # closed without an answer: there is no request to answer
    assert SECONDS * 0.9 <= time.monotonic() - started < 5 * SECONDS
    sock.close()
    assert client.get("/health").status_code == 200


def test_an_idle_connection_before_its_first_request_is_cut_off(server):
    sock = connect(server)
    started = time.monotonic()
    assert read_all(sock) == b""
    assert SECONDS * 0.9 <= time.monotonic() - started < 5 * SECONDS
    sock.close()


@pytest.mark.parametrize("path", ["/v1/chat/interactive", "/v1/chat/completions"])
def test_a_stalled_body_gets_a_408_and_the_session_is_untouched(server, client, path):
    before = stored(client)
    body = json.dumps({"session_id": SID, "prompt": "stalled", "interactive_mode": True,
                       "messages": [{"role": "user", "content": "stalled"}]}).encode()
    sock = connect(server)
    sock.sendall(head(path, len(body)) + body[:10])  # the rest never comes
    started = time.monotonic()
    answer = read_all(sock)  # the server closes after it: the unread body must not become a request
    assert SECONDS * 0.9 <= time.monotonic() - started < 1.9 * SECONDS  # at once, not at the next deadline
    status, _, rest = answer.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 408"), answer[:300]
    error = json.loads(rest.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "request_timeout" and f"{SECONDS:g} s" in error["message"]
    sock.close()
    assert stored(client) == before


def test_a_body_that_keeps_coming_within_the_deadline_is_served(server, client):
    """Each piece comes in time; the whole body takes three deadlines."""
    before = json.loads(stored(client))
    body = json.dumps({"session_id": SID, "prompt": "slow but steady", "interactive_mode": True}).encode()
    sock = connect(server)
    sock.sendall(head("/v1/chat/interactive", len(body), "connection: close\r\n"))
    pieces = [body[i:i + len(body) // 6 + 1] for i in range(0, len(body), len(body) // 6 + 1)]
    for piece in pieces:
        time.sleep(SECONDS / 2)
        sock.sendall(piece)
    status, _, rest = read_all(sock).partition(b"\r\n")
    sock.close()
    assert status.startswith(b"HTTP/1.1 200"), rest[:300]
    assert json.loads(rest.partition(b"\r\n\r\n")[2])["text"] == "echo: slow but steady"
    after = json.loads(stored(client))
    assert after["messages"][:len(before["messages"])] == before["messages"]
    assert after["messages"][-1] == {"role": "assistant", "content": "echo: slow but steady"}


def test_keep_alive_requests_after_a_quick_one_still_have_a_header_deadline(server):
    """The deadline is armed again when a response is complete: a kept-alive connection that then
    trickles a second request's headers is cut off like a new one."""
    sock = connect(server)
    sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
    first = sock.recv(65536)
    while b"\r\n\r\n" not in first:
        first += sock.recv(65536)
    length = int(first.lower().partition(b"content-length: ")[2].partition(b"\r\n")[0])
    while len(first.partition(b"\r\n\r\n")[2]) < length:
        first += sock.recv(65536)
    assert first.startswith(b"HTTP/1.1 200"), first[:200]
    started = time.monotonic()
    sock.sendall(b"GET /health HTTP/1.1\r\n")
    assert read_all(sock) == b""
    assert SECONDS * 0.9 <= time.monotonic() - started < 5 * SECONDS
    sock.close()


def test_the_body_deadline_passes_values_errors_and_cancellations_through():
    """``within`` runs a coroutine's first step itself (no timer when it does not wait): what it returns
    or raises, and a cancellation of the caller, go through as with a plain ``await``."""
    import asyncio

    from lmchat.serve.guard import within

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def at_once():
            return "at once"

        async def after(future, then=None):
            value = await future
            if then is not None:
                raise then
            return value

        assert await within(at_once(), 1) == "at once"
        future = loop.create_future()
        loop.call_later(0.02, future.set_result, "later")
        assert await within(after(future), 1) == "later"
        future = loop.create_future()
        loop.call_later(0.02, future.set_result, None)
        with pytest.raises(KeyError):
            await within(after(future, KeyError("raised after waiting")), 1)
        with pytest.raises(TimeoutError):
            await within(after(loop.create_future()), 0.05)
        seen = []

        async def watched(future):
            try:
                await future
            except asyncio.CancelledError:
                seen.append("cancelled inside")
                raise

        task = asyncio.create_task(within(watched(loop.create_future()), 5))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert seen == ["cancelled inside"]

    asyncio.run(main())


def test_a_client_is_watched_once_its_request_has_run_for_a_while():
    """``cancel_on_disconnect``: a watch whose block ended before ``WATCH_AFTER`` never reads ``receive``;
    the others, started together or later, notice the disconnect and cancel, each once."""
    import asyncio

    from lmchat.serve.deps import WATCH_AFTER, cancel_on_disconnect

    async def main() -> None:
        cancelled, read = [], []

        def receive_of(name):
            async def receive():
                read.append(name)
                return {"type": "http.disconnect"}
            return receive

        async def block(name: str, seconds: float) -> bool:
            async with cancel_on_disconnect(receive_of(name), lambda: cancelled.append(name)) as watch:
                await asyncio.sleep(seconds)
            return watch.left

        quick = asyncio.create_task(block("quick", WATCH_AFTER / 4))
        await asyncio.sleep(WATCH_AFTER / 2)
        slow = [asyncio.create_task(block(f"slow{i}", WATCH_AFTER * 3)) for i in range(3)]
        late = asyncio.create_task(block("late", WATCH_AFTER * 3))
        assert [await t for t in (quick, *slow, late)] == [False, True, True, True, True]
        assert sorted(cancelled) == sorted(read) == ["late", "slow0", "slow1", "slow2"]

    asyncio.run(main())
