"""The session manager with the echo backend: turns, busy sessions, capacity, eviction, owners, cancel."""
from __future__ import annotations

import threading
import time

import pytest

import lmchat
from lmchat import SessionManager, SessionPolicy
from lmchat.backends.echo import EchoBackend
from lmchat.errors import (
    CapacityExceeded,
    ConfigError,
    InvalidMessages,
    LmchatError,
    SessionBusy,
    SessionExists,
    SessionNotFound,
)
from lmchat.manager import ManagerLimits, TurnRequest
from lmchat.stores import VERSION_KEY, SQLiteStore, open_store

from . import tokenizers_fixtures as tf


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def assert_alternates(messages: list[dict]) -> None:
    """user, answer to that user (whole, or cut short by a cancel), ...: no turn interleaved with another."""
    body = [m for m in messages if m["role"] != "system"]
    assert [m["role"] for m in body] == ["user", "assistant"] * (len(body) // 2)
    for question, answer in zip(body[::2], body[1::2], strict=True):
        assert ("echo: " + question["content"]).startswith(answer["content"]) and answer["content"]


def test_a_turn_end_to_end():
    mgr = SessionManager(EchoBackend(), template="qwen2.5")
    sid = mgr.create(system="Be brief.")
    chunks = list(mgr.stream_turn(TurnRequest(sid, user("Hello there"))))
    assert "".join(c.text for c in chunks) == "echo: Hello there"
    assert chunks[-1].finish_reason == "stop" and all(c.finish_reason is None for c in chunks[:-1])
    assert mgr.store.load(sid)[VERSION_KEY] == 2  # created (1), then the turn (2)
    r = mgr.run_turn(TurnRequest(sid, user("And again"), max_new_tokens=2))
    assert (r.text, r.finish_reason) == ("echo: And ", "length")
    assert r.history_tokens < r.prompt_tokens and r.prefilled + r.reused == r.prompt_tokens
    assert r.parsed.content == "echo: And "
    s = mgr.get(sid)
    assert isinstance(s, lmchat.Session) and s.turns == 2
    assert s.context.endswith("echo: And ")  # cut short: committed without an end marker
    s.prompt("a copy: the managed session is unchanged")
    assert mgr.get(sid).turns == 2 and not mgr.get(sid).pending
    m = mgr.metrics()
    assert (m["turns_total"], m["sessions_in_memory"], m["sessions_active"]) == (2, 1, 0)
    assert m["turn_latency_seconds"]["count"] == 2 and m["tokens_prefilled_total"] > 0


def test_token_sessions_commit_the_generated_ids():
    tok = tf.deepseek()
    mgr = SessionManager(EchoBackend(tokenizer=tok), template="deepseek-v3")
    sid = mgr.create()
    first = mgr.run_turn(TurnRequest(sid, user("hi")))
    held = mgr.get(sid)
    assert held.context_ids[first.prompt_tokens:][: len(first.token_ids)] == list(first.token_ids)  # verbatim
    second = mgr.run_turn(TurnRequest(sid, user("more")))
    assert first.token_ids and second.reused > 0  # the engine's cache served the first turn
    assert second.history_tokens == held.step and second.prompt_tokens > held.step


def test_bad_input_and_refusals_change_nothing():
    mgr = SessionManager(EchoBackend(), template="qwen2.5")
    sid = mgr.create()
    mgr.run_turn(TurnRequest(sid, user("one")))
    with pytest.raises(InvalidMessages):
        mgr.stream_turn(TurnRequest(sid, [{"role": "bogus", "content": "x"}]))  # raised before any chunk
    with pytest.raises(ConfigError):
        mgr.run_turn(TurnRequest(sid, user("x"), params={"nope": 1}))
    assert mgr.store.load(sid)[VERSION_KEY] == 2 and mgr.metrics()["sessions_active"] == 0
    with pytest.raises(SessionExists):
        mgr.create(session_id=sid)
    with pytest.raises(ConfigError, match="session id"):
        mgr.create(session_id="has space")
    with pytest.raises(SessionNotFound) as info:
        mgr.run_turn(TurnRequest("absent", user("x")))
    assert str(info.value) == "no session 'absent'" and isinstance(info.value, KeyError)
    mgr.stream_turn(TurnRequest(sid, user("started, never read")))  # dropped at once: rolled back, unlocked
    assert mgr.run_turn(TurnRequest(sid, user("two"))).text == "echo: two"
    assert_alternates(mgr.get(sid).messages)
    assert mgr.metrics()["errors"] == {"InvalidMessages": 1, "ConfigError": 2, "SessionExists": 1,
                                       "SessionNotFound": 1}
    with pytest.raises(ConfigError, match="cannot expire"):
        SessionManager(EchoBackend(), limits=ManagerLimits(store_ttl=10))
    with pytest.raises(ConfigError, match="must be one of error, truncate, shift") as bad:
        SessionManager(EchoBackend(), session_defaults=SessionPolicy(overflow="drop"))
    assert bad.value.field == "overflow"


def test_threads_hammering_one_session_take_turns():
    mgr = SessionManager(EchoBackend(delay=0.002), template="qwen2.5")
    sid = mgr.create()
    done, busy, errors = [], [], []

    def work(n: int) -> None:
        for i in range(15):
            try:
                done.append(mgr.run_turn(TurnRequest(sid, user(f"thread {n} turn {i} says hi"))))
            except SessionBusy:
                busy.append(n)
                time.sleep(0.001)
            except Exception as exc:  # surfaced below
                errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and done and busy  # turns ran, and others were refused while one ran
    messages = mgr.get(sid).messages
    assert_alternates(messages)
    assert len(messages) == 2 * len(done) and mgr.store.version(sid) == len(done) + 1
    assert sorted(m["content"] for m in messages if m["role"] == "assistant") == sorted(r.text for r in done)
    assert mgr.metrics()["errors"]["SessionBusy"] == len(busy)


def test_max_active_refuses_at_capacity_and_cancel_keeps_the_partial_answer():
    mgr = SessionManager(EchoBackend(delay=0.05), template="qwen2.5", limits=ManagerLimits(max_active=1))
    a, b = mgr.create(), mgr.create()
    stream = mgr.stream_turn(TurnRequest(a, user("one two three four five six seven eight")))
    first = next(stream)
    with pytest.raises(CapacityExceeded):
        mgr.run_turn(TurnRequest(b, user("no room")))
    with pytest.raises(SessionBusy):
        mgr.run_turn(TurnRequest(a, user("busy")))
    assert mgr.get(a).messages == [] and not mgr.get(a).pending  # mid-turn: the last committed state
    assert mgr.cancel(a) and not mgr.cancel(b)
    rest = list(stream)
    assert rest[-1].finish_reason == "cancelled"
    partial = first.text + "".join(c.text for c in rest)
    assert mgr.get(a).messages[-1]["content"] == partial != "echo: one two three four five six seven eight"
    assert mgr.run_turn(TurnRequest(b, user("room now"))).text == "echo: room now"
    assert mgr.run_turn(TurnRequest(a, user("after"))).text == "echo: after"


def test_a_closed_stream_commits_what_was_generated():
    mgr = SessionManager(EchoBackend(delay=0.02), template="qwen2.5")
    sid = mgr.create()
    stream = mgr.stream_turn(TurnRequest(sid, user("a b c d e f g h")))
    next(stream)
    stream.close()  # the client disconnected
    last = mgr.get(sid).messages[-1]
    assert last["role"] == "assistant" and last["content"].startswith("echo: ")
    assert mgr.store.version(sid) == 2 and mgr.run_turn(TurnRequest(sid, user("next"))).text == "echo: next"


def test_lru_and_idle_eviction_reload_from_the_store():
    backend = EchoBackend()
    mgr = SessionManager(backend, template="qwen2.5", limits=ManagerLimits(max_sessions=2))
    ids = [mgr.create() for _ in range(3)]
    for sid in ids:
        mgr.run_turn(TurnRequest(sid, user(f"hello {sid}")))
    m = mgr.metrics()
    assert m["sessions_in_memory"] == 2 and m["sessions_evicted_total"] >= 1
    again = mgr.run_turn(TurnRequest(ids[0], user("still there?")))  # evicted: reloaded, and its cache was dropped
    assert again.reused == 0 and mgr.metrics()["sessions_loaded_total"] >= 1
    assert_alternates(mgr.get(ids[0]).messages) and len(mgr.get(ids[0]).messages) == 4

    idle = SessionManager(EchoBackend(), template="qwen2.5", limits=ManagerLimits(idle_ttl=0.1))
    sid = idle.create()
    idle.run_turn(TurnRequest(sid, user("first")))
    time.sleep(0.2)
    assert idle.metrics()["sessions_in_memory"] == 0
    assert idle.run_turn(TurnRequest(sid, user("second"))).text == "echo: second"
    assert len(idle.get(sid).messages) == 4


def test_owners_never_see_each_other(tmp_path):
    path = tmp_path / "owners.db"
    mgr = SessionManager(EchoBackend(), template="qwen2.5", store=SQLiteStore(path))
    sid = mgr.create(owner="key-alice")
    mgr.run_turn(TurnRequest(sid, user("secret"), owner="key-alice"))
    for call in (lambda o: mgr.get(sid, owner=o), lambda o: mgr.run_turn(TurnRequest(sid, user("x"), owner=o)),
                 lambda o: mgr.end(sid, owner=o), lambda o: mgr.fork(sid, owner=o),
                 lambda o: mgr.cancel(sid, owner=o)):
        for other in ("key-bob", None):
            with pytest.raises(SessionNotFound):
                call(other)
    assert mgr.list(owner="key-bob") == [] and mgr.list() == []
    assert [i.id for i in mgr.list(owner="key-alice")] == [sid]
    other = SessionManager(EchoBackend(), template="qwen2.5", store=SQLiteStore(path))  # reloads from the file
    with pytest.raises(SessionNotFound):
        other.get(sid, owner="key-bob")
    assert other.get(sid, owner="key-alice").turns == 1
    assert b"key-alice" not in path.read_bytes()  # only a hash of the key is stored
    fork = mgr.fork(sid, owner="key-alice")
    assert mgr.get(fork, owner="key-alice").messages == mgr.get(sid, owner="key-alice").messages
    assert mgr.run_turn(TurnRequest(fork, user("forked"), owner="key-alice")).prefilled > 0
    mgr.end(sid, owner="key-alice")
    with pytest.raises(SessionNotFound):
        mgr.get(sid, owner="key-alice")
    assert [i.id for i in other.list(owner="key-alice")] == [fork]


def test_errors_are_lmchat_errors():
    assert all(isinstance(e, LmchatError) for e in (SessionExists("x"), SessionBusy("x"), CapacityExceeded(3)))
    assert str(SessionNotFound("x")) == "no session 'x'"  # not repr-quoted as KeyError would


async def _collect(mgr, sid, text):
    return [c async for c in mgr.astream_turn(TurnRequest(sid, user(text)))]


@pytest.mark.parametrize("on_loop", [True, False], ids=["on-loop", "pool"])
@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_asyncio_tasks_share_the_manager(on_loop, store, tmp_path):
    import asyncio

    mgr = SessionManager(EchoBackend(delay=0.01), template="qwen2.5", on_loop=on_loop,
                         store=open_store(f"sqlite:{tmp_path}/s.db" if store == "sqlite" else "memory"))
    assert mgr.on_loop is on_loop
    ids = [mgr.create() for _ in range(4)]

    async def main():
        # distinct sessions run at once
        outs = await asyncio.gather(*(_collect(mgr, sid, f"hello {n}") for n, sid in enumerate(ids)))
        assert ["".join(c.text for c in out) for out in outs] == [f"echo: hello {n}" for n in range(4)]
        # one session from several tasks: one turn runs, the others are refused at once
        same = await asyncio.gather(*(_collect(mgr, ids[0], f"race {n} a b c d") for n in range(5)),
                                    return_exceptions=True)
        assert sum(isinstance(r, list) for r in same) == 1
        assert sum(isinstance(r, SessionBusy) for r in same) == 4
        result = await mgr.arun_turn(TurnRequest(ids[1], user("collected")))
        assert result.text == "echo: collected" and result.finish_reason == "stop"
        # a consumer cancelled mid-stream (a client disconnect): the partial answer is committed
        stream = mgr.astream_turn(TurnRequest(ids[2], user("one two three four five six seven eight nine")))
        first = await stream.__anext__()
        task = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(200):  # the turn is drained, committed and saved in the background, then released
            if mgr.store.version(ids[2]) == 3 and mgr.metrics()["sessions_active"] == 0:
                break
            await asyncio.sleep(0.01)
        last = mgr.get(ids[2]).messages[-1]
        assert last["role"] == "assistant" and last["content"].startswith(first.text)
        assert last["content"] != "echo: one two three four five six seven eight nine"
        assert (await mgr.arun_turn(TurnRequest(ids[2], user("after")))).text == "echo: after"

    asyncio.run(main())
    for sid in ids:
        assert_alternates(mgr.get(sid).messages)
    assert mgr.metrics()["sessions_active"] == 0


def test_tool_calls_are_committed_parsed_so_results_can_answer_them():
    tools = [{"type": "function", "function": {"name": "weather", "description": "Weather of a city",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string"}}}}}]
    mgr = SessionManager(EchoBackend(prefix=""), template="qwen2.5")  # answers the user's text verbatim
    sid = mgr.create(tools=tools)
    call = '<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    r = mgr.run_turn(TurnRequest(sid, user(call)))
    (parsed,) = r.parsed.tool_calls
    assert parsed["function"]["name"] == "weather"
    assert mgr.get(sid).messages[-1]["tool_calls"][0]["id"] == parsed["id"]
    r = mgr.run_turn(TurnRequest(sid, [{"role": "tool", "content": "22C", "tool_call_id": parsed["id"]}]))
    assert r.finish_reason == "stop" and mgr.get(sid).messages[-2]["role"] == "tool"
    with pytest.raises(InvalidMessages, match="tool_call_id"):
        mgr.run_turn(TurnRequest(sid, [{"role": "tool", "content": "?", "tool_call_id": "call_unknown"}]))
