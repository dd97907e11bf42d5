"""`lmchat serve`'s one-off requests write nothing to the store: the real `openai` client on real stores.

A request that names no session (chat completions without a session id, a
Responses request with ``store: false``, LMDeploy's ``session_id: -1`` with
``interactive_mode: false``) runs on a session held in the server's memory
for its turn only. The SQLite file is watched from a connection of its own
(``PRAGMA data_version`` changes with every commit of another connection, so
a create and a delete that leave no row are still seen); Redis by its own
count of the commands it ran (``INFO commandstats``).

The command's app in this process (``InProcess``); the clients that leave a stream or give up waiting, against a
real server process (``Server``: a TestClient cancels a request where a server sees a disconnect).
"""
from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

import httpx  # noqa: E402

from .serve_helpers import InProcess, Server, lines  # noqa: E402
from .test_manager_oneoff import FileChanges  # noqa: E402

K1, K2 = "sk-one", "sk-two"
ECHO = ("--template", "qwen2.5", "--backend-option", "prefix=")
LONG = " ".join(f"word{i}" for i in range(300))
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return tmp_path_factory.mktemp("oneoff") / "sessions.db"


ARGS = ("--backend-option", "delay=0.005", "--max-active", "3")


@pytest.fixture(scope="module")
def process_db(tmp_path_factory):
    return tmp_path_factory.mktemp("oneoff-process") / "sessions.db"


@pytest.fixture(scope="module")
def launched(process_db):
    """The same server, a real process: for the clients that leave (the socket closes) or give up waiting. Started
    with the module, waited for by the test that needs it (``process``): it gets ready while the others run."""
    s = Server(*ECHO, "--store", f"sqlite:{process_db}", *ARGS, keys=(K1, K2), wait=False)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def server(db, launched):
    s = InProcess(*ECHO, "--store", f"sqlite:{db}", *ARGS, keys=(K1, K2))
    yield s
    s.stop()


@pytest.fixture
def process(launched):
    return launched.ready()


@pytest.fixture
def client(server):
    return server.openai(K1)


def http(server, key: str = K1, timeout: float = 30) -> httpx.Client:
    return server.client(key, timeout=timeout)


def load(server) -> dict:
    """The server's sessions in memory and turns running, once every turn has ended."""
    with http(server) as c:
        for _ in range(500):
            health = c.get("/health").json()
            if health["sessions_active"] == 0:
                return health
            time.sleep(0.01)
    raise AssertionError(f"turns still running: {health}")


def stateless_requests(server, client) -> list[str]:
    """One of each kind of request that names no session, streamed and not; the answers."""
    ask = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the capital of France?"}]
    answers = [client.chat.completions.create(model="m", messages=ask).choices[0].message.content]
    stream = client.chat.completions.create(model="m", messages=ask, stream=True,
                                            stream_options={"include_usage": True})
    answers.append("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
    answers.append(client.chat.completions.create(model="m", messages=ask, tools=TOOLS).choices[0].message.content)
    answers.append(client.responses.create(model="m", instructions="Be brief.", input="Hi", store=False).output_text)
    with client.responses.stream(model="m", input="Hi there", store=False) as stream:
        answers.append(stream.get_final_response().output_text)
    with http(server) as c:
        body = {"session_id": -1, "prompt": "LMDeploy's default", "interactive_mode": False}
        reply = c.post("/v1/chat/interactive", json=body).json()
        assert reply["ended"] is True
        answers.append(reply["text"])
        with c.stream("POST", "/v1/chat/interactive", json={**body, "stream": True}) as r:
            answers.append("".join(line["text"] for line in lines(r)))
    return answers


def test_stateless_requests_write_nothing_to_the_sqlite_store(server, client, db):
    kept = client.responses.create(model="m", input="A stored chain.")  # before the watch: the branch's parent
    changes = FileChanges(db)
    rows = changes.rows()
    answers = stateless_requests(server, client)
    assert answers == ["What is the capital of France?"] * 3 + ["Hi", "Hi there"] + ["LMDeploy's default"] * 2
    aside = client.responses.create(model="m", input="Just asking.", previous_response_id=kept.id, store=False)
    assert aside.output_text == "Just asking." and aside.previous_response_id == kept.id
    assert load(server)["sessions_active"] == 0
    assert not changes.changed()  # no commit at all: not even a create and a delete that leave no row
    assert changes.rows() == rows
    # the watch is not blind: a request that names a session is stored
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "keep me"}],
                                   extra_headers={"X-Session-Id": "named"})
    assert changes.changed()


def test_a_oneoff_reports_the_usage_a_new_session_does(client):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count the words here."}]
    oneoff = client.chat.completions.create(model="m", messages=messages)
    named = client.chat.completions.create(model="m", messages=messages, extra_headers={"X-Session-Id": "usage-1"})
    assert oneoff.usage.model_dump() == named.usage.model_dump()
    details = oneoff.usage.prompt_tokens_details
    assert details.cached_tokens == 0 and oneoff.usage.prompt_tokens > 0
    assert oneoff.choices[0].message.content == "Count the words here."
    r = client.responses.create(model="m", input="Count these.", store=False)
    stored = client.responses.create(model="m", input="Count these.")
    assert r.usage.model_dump() == stored.usage.model_dump() and r.store is False


def test_a_store_false_response_is_never_found(server, client):
    with http(server) as c, http(server, K2) as other:
        before = c.get("/v1/sessions").json()["data"]
        with client.responses.stream(model="m", input=LONG, store=False) as stream:
            for event in stream:
                if event.type == "response.created":  # mid-answer: its id is out, its session is not to be found
                    rid = event.response.id
                    for api in (c, other):
                        got = api.get(f"/v1/responses/{rid}")
                        assert got.status_code == 404 and got.json()["error"]["code"] == "response_not_found"
                    assert c.get("/v1/sessions").json()["data"] == before
        assert stream.get_final_response().output_text == LONG
        for method, path in (("GET", f"/v1/responses/{rid}"), ("GET", f"/v1/responses/{rid}/input_items"),
                             ("DELETE", f"/v1/responses/{rid}")):
            assert c.request(method, path).status_code == 404
        with pytest.raises(openai.NotFoundError) as e:
            client.responses.create(model="m", input="more", previous_response_id=rid)
        assert e.value.code == "previous_response_not_found"
        assert c.get("/v1/sessions").json()["data"] == before


def test_oneoffs_that_fail_or_are_left_leave_nothing(process, process_db):
    server, db, client = process, process_db, process.openai(K1)
    changes = FileChanges(db)
    in_memory = load(server)["sessions_in_memory"]
    with pytest.raises(openai.BadRequestError) as e:  # a bad message
        client.chat.completions.create(model="m", messages=[{"role": "robot", "content": "hi"}])
    assert e.value.code == "invalid_messages"
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="m", input=[{"role": "robot", "content": "hi"}], store=False)
    with http(server) as c:  # a client that leaves a stream mid-answer
        with c.stream("POST", "/v1/chat/completions", json={
                "messages": [{"role": "user", "content": LONG}], "stream": True}) as r:
            assert next(r.iter_lines()).startswith("data: ")
        with c.stream("POST", "/v1/responses", json={"input": LONG, "store": False, "stream": True}) as r:
            assert next(r.iter_lines()).startswith("event: ")
        with c.stream("POST", "/v1/chat/interactive", json={
                "session_id": -1, "prompt": LONG, "interactive_mode": False, "stream": True}) as r:
            assert next(r.iter_lines())
    with pytest.raises(httpx.ReadTimeout), http(server, timeout=0.3) as c:  # ... or a whole answer's wait
        c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": LONG}]})
    # capacity: three one-offs streaming hold --max-active 3; a fourth is refused
    with http(server) as a, http(server) as b, http(server) as d:
        streams = [x.stream("POST", "/v1/chat/completions", json={"messages": [{"role": "user", "content": LONG}],
                                                                  "stream": True}) for x in (a, b, d)]
        held = [s.__enter__().iter_lines() for s in streams]  # (an iterator dropped closes its response)
        for lines_of in held:
            assert next(lines_of).startswith("data: ")
        with pytest.raises(openai.RateLimitError) as e:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "me too"}])
        assert e.value.code == "over_capacity"
        for s in streams:
            s.__exit__(None, None, None)
    health = load(server)  # the abandoned turns ended in the background
    assert health["sessions_in_memory"] == in_memory
    assert not changes.changed()
    assert client.chat.completions.create(model="m", messages=[{"role": "user", "content": "ok"}]).choices[
        0].message.content == "ok"


def test_concurrent_oneoffs_of_one_key_get_their_own_answers(server, db):
    changes = FileChanges(db)
    answers: dict[int, str] = {}

    def ask(n: int) -> None:
        c = server.openai(K1, max_retries=2)
        messages = [{"role": "system", "content": f"You are number {n}."},
                    {"role": "user", "content": f"question {n} " + "word " * 20}]
        if n % 2:
            stream = c.chat.completions.create(model="m", messages=messages, stream=True)
            answers[n] = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        else:
            answers[n] = c.responses.create(model="m", instructions=messages[0]["content"],
                                            input=messages[1]["content"], store=False).output_text

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(3)]  # --max-active 3: all at once
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert answers == {n: f"question {n} " + "word " * 20 for n in range(3)}
    assert load(server)["sessions_active"] == 0
    assert not changes.changed()


def test_stateless_requests_send_redis_no_command(redis_server):
    redis = pytest.importorskip("redis")
    probe = redis.Redis.from_url(redis_server.url)
    s = InProcess(*ECHO, "--store", redis_server.url)
    try:
        client = s.openai("unused")
        kept = client.responses.create(model="m", input="A stored chain.")

        def commands() -> dict[str, int]:
            return {name: stats["calls"] for name, stats in probe.info("commandstats").items()
                    if name != "cmdstat_info"}

        before = commands()
        answers = stateless_requests(s, client)
        assert answers == ["What is the capital of France?"] * 3 + ["Hi", "Hi there"] + ["LMDeploy's default"] * 2
        assert commands() == before  # not one command: no write, no read, no delete
        # a store=false branch of a stored chain reads its parent, and writes nothing
        client.responses.create(model="m", input="Aside.", previous_response_id=kept.id, store=False)
        after = commands()
        changed = {name for name in after if after[name] != before.get(name)}
        assert changed and changed <= {"cmdstat_hget", "cmdstat_multi", "cmdstat_exec", "cmdstat_hgetall",
                                       "cmdstat_lrange", "cmdstat_hmget"}, changed
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "keep me"}],
                                       extra_headers={"X-Session-Id": "named"})
        last = commands()
        assert last["cmdstat_evalsha"] > after["cmdstat_evalsha"]
    finally:
        s.stop()
