"""``GET /v1/responses/{id}/input_items`` lists every item a response was generated from, as OpenAI's does: the
earlier turns of its chain or conversation (their answers and tool calls included, under the ids they were
returned with) and then its own input; paginated, and the same after a restart.

The real ``openai`` client against ``lmchat serve --backend echo`` (``prefix=``: the answer is the last user
message, so a user message in Qwen2.5's tool-call syntax makes the model call a tool).
"""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

import httpx  # noqa: E402
from openai.types.responses import ResponseItemList  # noqa: E402

from .serve_helpers import InProcess  # noqa: E402

KEY = "sk-items"
ECHO = ("--template", "qwen2.5", "--backend-option", "prefix=", "--session-len", "6000")
TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'  # what Qwen2.5 writes


@pytest.fixture(scope="module")
def server():
    s = InProcess(*ECHO, "--store", "memory", keys=(KEY,))
    yield s
    s.stop()


@pytest.fixture
def client(server):
    return server.openai(KEY)


def http(server) -> httpx.Client:
    return server.client(KEY, base="/v1")


def listed(client, rid: str) -> list:
    """Every input item of ``rid``, oldest first (the client follows ``has_more`` page by page)."""
    return list(client.responses.input_items.list(rid, order="asc", limit=2))


def shape(items) -> list[tuple]:
    """(id, type, role or name, text) of each item."""
    out = []
    for i in items:
        if i.type == "message":
            out.append((i.id, i.type, i.role, i.content[0].text))
        elif i.type == "function_call":
            out.append((i.id, i.type, i.name, i.arguments))
        else:
            out.append((i.id, i.type, i.call_id, i.output))
    return out


def test_a_chain_of_three_lists_every_earlier_turn_with_the_ids_its_items_were_returned_with(server, client):
    one = client.responses.create(model="m", instructions="Use the tools.", tools=TOOLS, input=CALL)
    [call] = one.output
    two = client.responses.create(model="m", instructions="Use the tools.", tools=TOOLS, previous_response_id=one.id,
                                  input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
                                         {"role": "user", "content": "It is sunny."}])
    three = client.responses.create(model="m", instructions="Use the tools.", tools=TOOLS,
                                    previous_response_id=two.id, input="Thanks.")
    items = listed(client, three.id)
    sid = one.id.split("_")[1]
    assert shape(items) == [
        (f"msg_{sid}_0", "message", "user", CALL),
        (call.id, "function_call", "get_weather", '{"city": "Paris"}'),
        (f"fco_{sid}_2", "function_call_output", call.call_id, "sunny"),
        (f"msg_{sid}_3", "message", "user", "It is sunny."),
        (two.output[0].id, "message", "assistant", "It is sunny."),
        (f"msg_{sid}_5", "message", "user", "Thanks."),
    ]
    assert call.id == f"fc_{sid}_1_0" and items[1].call_id == call.call_id
    # the instructions are no item (as in OpenAI); each response lists its own ancestry, up to its input
    assert [i.id for i in listed(client, two.id)] == [i.id for i in items[:4]]
    assert [i.id for i in listed(client, one.id)] == [items[0].id]
    # OpenAI's default order is newest first; the JSON is the openai package's own list type
    with http(server) as api:
        raw = ResponseItemList.model_validate(api.get(f"/responses/{three.id}/input_items").json())
    assert [i.id for i in raw.data] == [i.id for i in reversed(items)]
    assert (raw.first_id, raw.last_id, raw.has_more) == (items[-1].id, items[0].id, False)


def test_a_branch_lists_only_its_own_ancestry_under_the_ids_of_the_chain_it_came_from(client):
    a = client.responses.create(model="m", input="a")
    b = client.responses.create(model="m", input="b", previous_response_id=a.id)
    client.responses.create(model="m", input="c", previous_response_id=b.id)
    branch = client.responses.create(model="m", input="b'", previous_response_id=a.id)  # a is older: a fork
    assert branch.id.split("_")[1] != a.id.split("_")[1]
    trunk = listed(client, b.id)
    assert shape(listed(client, branch.id)) == shape(trunk[:2]) + [
        (f"msg_{branch.id.split('_')[1]}_2", "message", "user", "b'")]
    assert trunk[1].id == a.output[0].id
    # a branch of the branch: the trunk's items, then the branch's, each under the ids it had
    on = client.responses.create(model="m", input="on the branch", previous_response_id=branch.id)
    client.responses.create(model="m", input="further", previous_response_id=on.id)
    twig = client.responses.create(model="m", input="twig", previous_response_id=on.id)
    assert len({r.id.split("_")[1] for r in (a, branch, twig)}) == 3
    along = listed(client, on.id)
    assert [i.id for i in listed(client, twig.id)][:-1] == [i.id for i in along] + [on.output[0].id]
    assert [i.content[0].text for i in listed(client, twig.id)] == [
        "a", "a", "b'", "b'", "on the branch", "on the branch", "twig"]
    # the branch continued from itself is one session: its items stay named as they were
    assert [i.id for i in listed(client, branch.id)] == [i.id for i in along[:3]]


def test_a_conversation_lists_its_items_up_to_the_response_with_the_conversations_ids(client):
    conv = client.conversations.create(items=[{"role": "user", "content": "dropped"},
                                              {"role": "user", "content": "kept"}])
    first = client.conversations.items.list(conv.id, order="asc").data[0]
    client.conversations.items.delete(first.id, conversation_id=conv.id)  # never seen by the model
    one = client.responses.create(model="m", conversation=conv.id, input="one")
    client.conversations.items.create(conv.id, items=[{"role": "user", "content": "added"}])
    two = client.responses.create(model="m", conversation=conv.id, input="two")
    client.responses.create(model="m", conversation=conv.id, input="three")
    conversation = client.conversations.items.list(conv.id, order="asc").data
    assert [i.content[0].text for i in conversation] == ["kept", "one", "one", "added", "two", "two", "three",
                                                         "three"]
    assert [i.id for i in listed(client, two.id)] == [i.id for i in conversation[:5]]
    assert [i.id for i in listed(client, one.id)] == [i.id for i in conversation[:2]]
    # a branch off a conversation's response keeps the conversation's ids (the deleted item's gap too)
    branch = client.responses.create(model="m", input="aside", previous_response_id=one.id)
    assert [i.id for i in listed(client, branch.id)][:-1] == [i.id for i in conversation[:3]]


def test_pages_follow_limit_after_and_order(server, client):
    previous = None
    for turn in range(4):
        previous = client.responses.create(model="m", input=f"q{turn}", previous_response_id=previous).id
    every = [i.id for i in client.responses.input_items.list(previous, order="asc", limit=100)]
    assert len(every) == 7
    with http(server) as api:
        def page(**params) -> dict:
            r = api.get(f"/responses/{previous}/input_items", params=params)
            assert r.status_code == 200, r.text
            return r.json()

        p = page(limit=3, order="asc")
        assert [i["id"] for i in p["data"]] == every[:3] and p["has_more"] and p["last_id"] == every[2]
        p = page(limit=3, order="asc", after=p["last_id"])
        assert [i["id"] for i in p["data"]] == every[3:6] and p["has_more"]
        p = page(limit=3, order="asc", after=p["last_id"])
        assert [i["id"] for i in p["data"]] == every[6:] and not p["has_more"]
        p = page(limit=2)  # desc by default
        assert [i["id"] for i in p["data"]] == every[::-1][:2] and p["has_more"]
        p = page(limit=20, after=every[3])
        assert [i["id"] for i in p["data"]] == every[2::-1] and not p["has_more"]
        assert len(page()["data"]) == 7 and page(limit=7)["has_more"] is False
        # include is accepted as OpenAI takes it (the client sends include[]); it adds nothing to text items
        p = page(**{"include[]": ["message.output_text.logprobs", "reasoning.encrypted_content"]})
        assert [i["id"] for i in p["data"]] == every[::-1]
    items = client.responses.input_items.list(previous, include=["message.output_text.logprobs"], limit=1)
    assert [i.id for i in items] == every[::-1]  # the client pages through, one item at a time


def test_an_unknown_response_is_a_404_and_bad_parameters_a_400_naming_the_field(server, client):
    rid = client.responses.create(model="m", input="x").id
    with http(server) as api:
        for path in ("/responses/resp_nope/input_items", f"/responses/{rid[:-1]}9/input_items"):
            r = api.get(path)
            assert r.status_code == 404 and r.json()["error"]["code"] == "response_not_found", r.text
            assert r.json()["error"]["param"] == "response_id"
        for params, field in (({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"limit": "many"}, "limit"),
                              ({"order": "sideways"}, "order"), ({"include[]": "everything"}, "include[0]"),
                              ({"include": "file_search_call.results", "include[]": "x"}, "include[0]")):
            r = api.get(f"/responses/{rid}/input_items", params=params)
            error = r.json()["error"]
            assert r.status_code == 400 and error["param"] == field and error["code"] == "invalid_value", r.text
            assert error["message"].startswith(f"{field}: ")
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list("resp_nope")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.input_items.list(rid, limit=500)
    assert caught.value.body["param"] == "limit"


def test_the_list_is_the_same_after_a_restart_on_the_same_sqlite_file(tmp_path):
    args = (*ECHO, "--store", f"sqlite:{tmp_path / 'sessions.db'}")

    def everything(c, ids) -> list:
        return [[i.model_dump() for i in c.responses.input_items.list(rid, order="asc", limit=100)] for rid in ids]

    first = InProcess(*args, keys=(KEY,))
    try:
        c = first.openai(KEY)
        one = c.responses.create(model="m", input="one")
        two = c.responses.create(model="m", input="two", previous_response_id=one.id)
        three = c.responses.create(model="m", input="three", previous_response_id=two.id)
        branch = c.responses.create(model="m", input="two'", previous_response_id=one.id)
        conv = c.conversations.create(items=[{"role": "user", "content": "hello"}])
        said = c.responses.create(model="m", conversation=conv.id, input="said")
        ids = [one.id, two.id, three.id, branch.id, said.id]
        before = everything(c, ids)
    finally:
        first.stop()
    assert [len(items) for items in before] == [1, 3, 5, 3, 2]
    second = InProcess(*args, keys=(KEY,))
    try:
        c = second.openai(KEY)
        assert everything(c, ids) == before
    finally:
        second.stop()
