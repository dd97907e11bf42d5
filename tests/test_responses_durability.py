"""Responses and conversations are sessions in the store: they survive a SIGKILL (SQLite) and are shared by
two replicas on one Redis, response ids, conversation items and all."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

import httpx  # noqa: E402

from .serve_helpers import Server  # noqa: E402

ECHO = ("--template", "qwen2.5", "--backend-option", "prefix=")
LONG = " ".join(f"word{i}" for i in range(400))
KEY = "sk-durable"


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)


def test_sigkill_mid_response_keeps_every_stored_response_and_conversation(tmp_path):
    args = (*ECHO, "--store", f"sqlite:{tmp_path / 'sessions.db'}", "--backend-option", "delay=0.01")
    first = Server(*args, keys=(KEY,))
    try:
        c = client(first)
        one = c.responses.create(model="m", instructions="Be brief.", input="first question")
        two = c.responses.create(model="m", instructions="Be brief.", input="second question",
                                 previous_response_id=one.id)
        conv = c.conversations.create(items=[{"role": "user", "content": "kept"}], metadata={"k": "v"})
        c.responses.create(model="m", conversation=conv.id, input="answered")
        stream = c.responses.create(model="m", instructions="Be brief.", input=LONG, previous_response_id=two.id,
                                    stream=True)
        events = iter(stream)
        while next(events).type != "response.output_text.delta":
            pass  # the third turn is being generated
        first.kill()
    finally:
        first.stop()
    second = Server(*args, keys=(KEY,))
    try:
        c = client(second)
        assert c.responses.retrieve(two.id).output_text == "second question"
        assert c.responses.retrieve(one.id).instructions == "Be brief."
        assert [i.content[0].text for i in c.responses.input_items.list(two.id)] == [
            "second question", "first question", "first question"]
        # the interrupted turn never committed: the second response is still the chain's latest, so the chain
        # goes on in its session; the new engine holds nothing, so everything is prefilled again
        three = c.responses.create(model="m", instructions="Be brief.", input="third question",
                                   previous_response_id=two.id)
        assert three.id.split("_")[1] == two.id.split("_")[1] and three.id.endswith("_2")
        assert three.usage.input_tokens_details.cached_tokens == 0
        assert c.conversations.retrieve(conv.id).metadata == {"k": "v"}
        items = c.conversations.items.list(conv.id, order="asc").data
        assert [i.content[0].text for i in items] == ["kept", "answered", "answered"]
        more = c.responses.create(model="m", conversation=conv.id, input="after the restart")
        assert more.output_text == "after the restart"
    finally:
        second.stop()


def test_two_replicas_on_one_redis_continue_each_others_responses_and_conversations(own_redis):
    pytest.importorskip("redis", reason="the redis extra is not installed (pip install 'lmchat[redis]')")
    a, b = Server(*ECHO, "--store", own_redis.url, keys=(KEY,)), None
    try:
        b = Server(*ECHO, "--store", own_redis.url, keys=(KEY,))
        ca, cb = client(a), client(b)
        one = ca.responses.create(model="m", input="asked on replica A")
        two = cb.responses.create(model="m", input="asked on replica B", previous_response_id=one.id)
        three = ca.responses.create(model="m", input="back on replica A", previous_response_id=two.id)
        assert {r.id.split("_")[1] for r in (one, two, three)} == {one.id.split("_")[1]}  # one session throughout
        assert three.output_text == "back on replica A"
        for c in (ca, cb):
            assert c.responses.retrieve(two.id).output_text == "asked on replica B"
        # a branch made on B from A's first response, seen from A
        branch = cb.responses.create(model="m", input="a branch on B", previous_response_id=one.id)
        assert ca.responses.retrieve(branch.id).previous_response_id == one.id
        conv = ca.conversations.create()
        cb.conversations.items.create(conv.id, items=[{"role": "user", "content": "added on B"}])
        answered = ca.responses.create(model="m", conversation=conv.id, input="answered on A")
        assert answered.output_text == "answered on A"
        listed = [i.content[0].text for i in cb.conversations.items.list(conv.id, order="asc").data]
        assert listed == ["added on B", "answered on A", "answered on A"]
        cb.responses.delete(one.id)
        with pytest.raises(openai.NotFoundError):
            ca.responses.retrieve(one.id)
        other = openai.OpenAI(base_url=f"{a.url}/v1", api_key="sk-other", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            other.responses.retrieve(two.id)
        own_redis.kill()
        down = httpx.post(f"{b.url}/v1/responses", json={"input": "x", "previous_response_id": three.id},
                          headers={"Authorization": f"Bearer {KEY}"})
        assert down.status_code == 503 and down.json()["error"]["code"] == "store_unavailable"
    finally:
        a.stop()
        if b is not None:
            b.stop()
