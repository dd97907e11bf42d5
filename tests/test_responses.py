"""The Responses API with the real ``openai`` client against ``lmchat serve --backend echo``.

The echo backend (``prefix=``) answers the last user message verbatim, so a
user message written in Qwen2.5's tool-call syntax makes the model "call" a
tool, and counts (characters: no tokenizer) show what the engine reused.
"""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

import httpx  # noqa: E402
from openai.types.responses import Response, ResponseItemList  # noqa: E402

from .serve_helpers import InProcess  # noqa: E402

K1, K2 = "sk-one", "sk-two"
TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'  # what Qwen2.5 writes


@pytest.fixture(scope="module")
def server():
    s = InProcess("--template", "qwen2.5", "--store", "memory", "--backend-option", "prefix=", "--session-len", "3000",
               keys=(K1, K2))
    yield s
    s.stop()


@pytest.fixture
def client(server):
    return server.openai(K1)


def http(server, key: str = K1) -> httpx.Client:
    return server.client(key, base="/v1")


def session_of(response_id: str) -> str:
    return response_id.split("_")[1]


def strict(raw: dict) -> Response:
    """The response JSON as the openai package's own type, validated (the client itself does not check)."""
    return Response.model_validate(raw)


def test_a_chain_of_five_responses_is_one_session_extended_a_delta_at_a_time(server, client):
    previous, ids = None, []
    for turn in range(5):
        r = client.responses.create(model="m", instructions="Be brief.", input=f"question {turn}",
                                    previous_response_id=previous)
        assert r.output_text == f"question {turn}" and r.status == "completed"
        assert r.previous_response_id == previous
        if turn:  # the engine kept the earlier turns: only the new one was prefilled
            details = r.usage.input_tokens_details
            assert details.cached_tokens > r.usage.input_tokens / 2 and details.cache_miss_reason is None
        previous = r.id
        ids.append(r.id)
    assert len({session_of(i) for i in ids}) == 1
    with http(server) as api:
        raw = api.get(f"/responses/{ids[2]}").json()
        strict(raw)
        assert raw["output"][0]["content"][0]["text"] == "question 2" and raw["instructions"] == "Be brief."
        assert raw["previous_response_id"] == ids[1] and raw["usage"]["input_tokens_details"]["cached_tokens"] > 0
        session = api.get(f"/sessions/{session_of(ids[0])}").json()
        items = ResponseItemList.model_validate(api.get(f"/responses/{ids[3]}/input_items").json())
    assert session["turns"] == 5 and session["messages"][0] == {"role": "system", "content": "Be brief."}
    # the items the response was generated from: the chain's earlier turns too, newest first
    assert [i.content[0].text for i in items.data] == ["question 3", "question 2", "question 2", "question 1",
                                                       "question 1", "question 0", "question 0"]
    assert [i.role for i in client.responses.input_items.list(ids[3], order="asc")][:3] == ["user", "assistant",
                                                                                           "user"]
    assert client.responses.retrieve(ids[4]).output_text == "question 4"


def test_a_branch_from_turn_two_forks_the_conversation_up_to_it(server, client):
    r = []
    for turn in range(4):
        r.append(client.responses.create(model="m", input=f"turn {turn}",
                                         previous_response_id=r[-1].id if r else None))
    branch = client.responses.create(model="m", input="another third turn", previous_response_id=r[1].id)
    assert session_of(branch.id) != session_of(r[1].id)
    assert "forked from session" in branch.usage.input_tokens_details.cache_miss_reason
    with http(server) as api:
        held = [m["content"] for m in api.get(f"/sessions/{session_of(branch.id)}").json()["messages"]]
    assert held == ["turn 0", "turn 0", "turn 1", "turn 1", "another third turn", "another third turn"]
    # the branch is a chain of its own, and the original chain goes on from its latest response
    on_branch = client.responses.create(model="m", input="on the branch", previous_response_id=branch.id)
    assert session_of(on_branch.id) == session_of(branch.id) and on_branch.usage.input_tokens_details.cached_tokens
    last = client.responses.create(model="m", input="turn 4", previous_response_id=r[3].id)
    assert session_of(last.id) == session_of(r[0].id) and last.usage.input_tokens_details.cached_tokens > 0
    assert client.responses.retrieve(r[2].id).output_text == "turn 2"


def test_a_retry_with_the_same_idempotency_key_answers_the_stored_response(server, client):
    """A retried request (its first attempt landed, e.g. after a 503 store_timeout) runs no second turn."""
    def create(key, **kw):
        return client.responses.create(model="m", extra_headers={"Idempotency-Key": key}, **kw)

    first = create("chain-1", input="first")
    again = create("chain-1", input="first")  # a new chain: found again through the key
    assert again.id == first.id and again.output_text == "first"
    second = create("chain-2", input="second", previous_response_id=first.id)
    retried = create("chain-2", input="second", previous_response_id=first.id)
    assert retried.id == second.id and retried.output_text == "second" and retried.usage == second.usage
    with http(server) as api:
        held = [m["content"] for m in api.get(f"/sessions/{session_of(first.id)}").json()["messages"]]
        assert held == ["first", "first", "second", "second"]  # one turn each, no branch
        streamed = api.post("/responses", json={"model": "m", "input": "second", "stream": True,
                                                "previous_response_id": first.id},
                            headers={"Idempotency-Key": "chain-2"}).text
    kinds = [line[len("event: "):] for line in streamed.splitlines() if line.startswith("event: ")]
    assert kinds == ["response.created", "response.in_progress", "response.completed"]
    assert f'"id": "{second.id}"' in streamed
    # another key, or none, is another request: it runs (a branch off the older response)
    other = create("chain-3", input="second", previous_response_id=first.id)
    assert session_of(other.id) != session_of(first.id)
    # another API key's chain of the same key is its own
    theirs = server.openai(K2).responses.create(
        model="m", input="mine", extra_headers={"Idempotency-Key": "chain-1"})
    assert theirs.output_text == "mine" and theirs.id != first.id


def test_a_retried_branch_answers_the_branch_its_first_attempt_made(server, client):
    """A request off an older response forks a branch; its retry (same key) finds that branch, runs nothing."""
    def create(key, **kw):
        return client.responses.create(model="m", extra_headers={"Idempotency-Key": key}, **kw)

    first = client.responses.create(model="m", input="root")
    client.responses.create(model="m", input="latest", previous_response_id=first.id)  # first is older now
    branch = create("branch-1", input="off the root", previous_response_id=first.id)
    assert session_of(branch.id) != session_of(first.id)
    with http(server) as api:
        before = {s["id"] for s in api.get("/sessions", params={"limit": 1000}).json()["data"]}
        retried = create("branch-1", input="off the root", previous_response_id=first.id)
        after = {s["id"] for s in api.get("/sessions", params={"limit": 1000}).json()["data"]}
        held = [m["content"] for m in api.get(f"/sessions/{session_of(branch.id)}").json()["messages"]]
    assert retried.id == branch.id and retried.output_text == "off the root" and retried.usage == branch.usage
    assert after == before  # no second branch
    assert held == ["root", "root", "off the root", "off the root"]  # one turn on the branch
    # the same key off another response is another request
    other = create("branch-1", input="off the root", previous_response_id=branch.id)
    assert other.id != branch.id


def test_a_conversation_with_a_tool_call_and_its_output(server, client):
    conv = client.conversations.create(items=[{"role": "user", "content": "I am in France."}],
                                       metadata={"topic": "weather"})
    assert conv.id.startswith("conv_") and conv.metadata == {"topic": "weather"}
    r = client.responses.create(model="m", conversation=conv.id, tools=TOOLS, input=CALL)
    [call] = r.output
    assert call.type == "function_call" and call.name == "get_weather" and call.arguments == '{"city": "Paris"}'
    assert r.conversation.id == conv.id and r.tools[0].name == "get_weather"
    done = client.responses.create(model="m", conversation=conv.id, tools=TOOLS, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature": 21}'},
        {"role": "user", "content": "So it is warm."}])
    assert done.output_text == "So it is warm." and done.usage.input_tokens_details.cached_tokens > 0
    items = client.conversations.items.list(conv.id, order="asc").data
    assert [i.type for i in items] == ["message", "message", "function_call", "function_call_output", "message",
                                       "message"]
    assert items[2].call_id == items[3].call_id == call.call_id
    assert client.conversations.items.retrieve(items[3].id, conversation_id=conv.id).output == '{"temperature": 21}'
    assert client.conversations.update(conv.id, metadata={"topic": "done"}).metadata == {"topic": "done"}
    # items added between responses are sent with the next one, without a reset
    client.conversations.items.create(conv.id, items=[{"role": "user", "content": "Noted."}])
    after = client.responses.create(model="m", conversation=conv.id, tools=TOOLS, input="And tomorrow?")
    assert after.output_text == "And tomorrow?" and after.usage.input_tokens_details.cache_miss_reason is None
    assert [m.content[0].text for m in client.conversations.items.list(conv.id, limit=3).data] == [
        "And tomorrow?", "And tomorrow?", "Noted."]
    # a deleted item leaves the conversation; the next turn renders it again from the start
    client.conversations.items.delete(items[0].id, conversation_id=conv.id)
    again = client.responses.create(model="m", conversation=conv.id, tools=TOOLS, input="Still there?")
    assert "was deleted" in again.usage.input_tokens_details.cache_miss_reason
    assert client.conversations.items.list(conv.id, order="asc").data[0].id == items[1].id
    with pytest.raises(openai.ConflictError):  # the first response's state held the deleted item
        client.responses.create(model="m", input="x", previous_response_id=r.id)
    assert client.conversations.delete(conv.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conv.id)


def test_a_streamed_response_and_a_streamed_tool_call(client):
    events = list(client.responses.create(model="m", input="three little words", stream=True))
    kinds = [e.type for e in events]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added"] + ["response.output_text.delta"] * 3 + [
        "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert final.output_text == "three little words" == "".join(e.delta for e in events if "delta" in e.type)
    assert client.responses.retrieve(final.id).model_dump() == final.model_dump()
    with client.responses.stream(model="m", input=CALL, tools=TOOLS, previous_response_id=final.id) as stream:
        kinds = [e.type for e in stream]
        response = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds and kinds[-1] == "response.completed"
    [call] = response.output
    assert call.call_id == client.responses.retrieve(response.id).output[0].call_id
    answered = client.responses.create(model="m", tools=TOOLS, previous_response_id=response.id, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
        {"role": "user", "content": "ok"}])
    assert answered.output_text == "ok"


def test_store_false_keeps_nothing(server, client):
    with http(server) as api:
        before = api.get("/sessions").json()["data"]
        r = client.responses.create(model="m", input="forget me", store=False)
        assert r.output_text == "forget me"
        stream = list(client.responses.create(model="m", input="me too", store=False, stream=True))
        assert stream[-1].response.output_text == "me too"
        kept = client.responses.create(model="m", input="kept")
        branch = client.responses.create(model="m", input="not kept", previous_response_id=kept.id, store=False)
        assert branch.output_text == "not kept"
        for _ in range(100):  # a stream's one-off session ends just after its last event
            after = api.get("/sessions").json()["data"]
            if len(after) == len(before) + 1:
                break
        assert [s["id"] for s in after if s not in before] == [session_of(kept.id)]
    for rid in (r.id, branch.id):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(rid)


def test_deleted_responses_are_gone_and_a_chain_without_any_leaves_with_them(server, client):
    first = client.responses.create(model="m", input="one")
    second = client.responses.create(model="m", input="two", previous_response_id=first.id)
    assert client.responses.delete(first.id) is None
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.retrieve(first.id)
    assert e.value.code == "response_not_found"
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model="m", input="x", previous_response_id=first.id)
    assert e.value.code == "previous_response_not_found" and e.value.param == "previous_response_id"
    assert client.responses.retrieve(second.id).output_text == "two"
    client.responses.delete(second.id)
    with http(server) as api:
        assert api.get(f"/sessions/{session_of(second.id)}").status_code == 404


def test_another_key_sees_no_response_and_no_conversation(server, client):
    r = client.responses.create(model="m", input="mine")
    conv = client.conversations.create()
    other = server.openai(K2)
    with http(server, K2) as api:
        theirs = api.get(f"/responses/{r.id}")
        missing = api.get(f"/responses/resp_{'0' * 32}_0")
        assert theirs.status_code == missing.status_code == 404
        assert theirs.json()["error"]["code"] == missing.json()["error"]["code"] == "response_not_found"
        assert api.get(f"/conversations/{conv.id}").status_code == 404
        assert api.get(f"/conversations/{conv.id}/items").status_code == 404
        assert api.delete(f"/responses/{r.id}").status_code == 404
    for call in (lambda: other.responses.create(model="m", input="x", previous_response_id=r.id),
                 lambda: other.responses.create(model="m", input="x", conversation=conv.id),
                 lambda: other.responses.input_items.list(r.id),
                 lambda: other.conversations.items.create(conv.id, items=[{"role": "user", "content": "x"}])):
        with pytest.raises(openai.NotFoundError):
            call()
    assert client.responses.retrieve(r.id).output_text == "mine"
    assert client.conversations.items.list(conv.id).data == []


def test_truncation_disabled_refuses_an_overflow_and_auto_drops_old_turns(client):
    long = " ".join(f"w{i}" for i in range(300))  # about 1,500 characters: two turns overflow 3,000
    first = client.responses.create(model="m", input=long)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="m", input=long, previous_response_id=first.id)
    assert e.value.code == "context_length_exceeded"
    kept = client.responses.create(model="m", input=long, previous_response_id=first.id, truncation="auto")
    assert kept.output_text == long and kept.truncation == "auto"
    assert kept.usage.input_tokens_details.cache_miss_reason  # the oldest turn was dropped


@pytest.fixture(scope="module")
def qwen3():
    s = InProcess("--template", "qwen3", "--store", "memory", "--backend-option", "prefix=")
    yield s.openai()
    s.stop()


def test_reasoning_comes_back_as_a_reasoning_item_and_effort_none_turns_qwen3_thinking_off(qwen3):
    thought = "<think>\nThe capital of France.\n</think>\n\nParis."  # what Qwen3 writes
    r = qwen3.responses.create(model="m", input=thought)
    reasoning, message = r.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text == "The capital of France."
    assert message.type == "message" and r.output_text == "Paris."
    assert qwen3.responses.retrieve(r.id).output == r.output
    events = list(qwen3.responses.create(model="m", input=thought, previous_response_id=r.id, stream=True))
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == "The capital of France."
    assert events[-1].response.output == qwen3.responses.retrieve(events[-1].response.id).output
    off = qwen3.responses.create(model="m", input="Just answer.", previous_response_id=events[-1].response.id,
                                 reasoning={"effort": "none"})
    assert off.usage.input_tokens_details.cache_miss_reason == "the reasoning setting changed"
    assert off.reasoning.effort == "none" and off.output_text == "Just answer."
    same = qwen3.responses.create(model="m", input="Again.", previous_response_id=off.id, reasoning={"effort": "none"})
    # the setting stays: no edit; Qwen3's own template drops the empty think block from history, which resets
    # every turn with thinking off (QwenLM/Qwen3#1826), and lmchat says so
    assert same.usage.input_tokens_details.cache_miss_reason.startswith("the template renders earlier turns")
