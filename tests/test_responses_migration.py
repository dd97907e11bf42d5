"""A store written by release 1 of the Responses and Conversations state (format 1: one-letter keys) answers
the same after the upgrade, and its chains and conversations go on.

Release 1 is a commit of this repository's history: its ``lmchat`` package (``git archive``) serves an SQLite
store first, the records are made and every read of them is kept; then this tree serves the same file.
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

import httpx  # noqa: E402

from lmchat.serve.chain_state import (  # noqa: E402
    DROPPED_FORMAT,
    FORMAT,
    Cut,
    Dropped,
    DroppedMessage,
    Note,
    Run,
    Same,
    SessionState,
)
from lmchat.stores.sqlite import SQLiteStore  # noqa: E402

from .serve_helpers import InProcess, Server  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: the last commit that wrote format 1 (the release before typed state)
RELEASE_1 = "e818f1d568266b14dad1d18d6008828e70df57e0"
KEY = "sk-migrate"
ARGS = ("--template", "qwen2.5", "--backend-option", "prefix=", "--session-len", "4000")
TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'  # what Qwen2.5 writes


@pytest.fixture(scope="module")
def release_1(tmp_path_factory) -> Path:
    """Release 1's ``lmchat`` package, from the repository's history (skipped without it: a shallow clone)."""
    try:
        tar = subprocess.run(["git", "archive", RELEASE_1, "lmchat"], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"git history with {RELEASE_1[:8]} is not available")
    out = tmp_path_factory.mktemp("release-1")
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as archive:
        # the data filter where the Python has it (3.10.12+); the archive is this repository's own either way
        archive.extractall(out, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return out


@contextlib.contextmanager
def working_directory(path: Path):
    """``contextlib.chdir`` of Python 3.11, on 3.10 too."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


@contextlib.contextmanager
def serving(store: Path, source: Path | None = None):
    """A server on the SQLite file ``store``, from ``source``'s package: a process; None: this tree's, its app in
    this process."""
    server: Server | InProcess
    if source is None:
        server = InProcess(*ARGS, "--store", f"sqlite:{store}", keys=(KEY,))
    else:
        # ``python -m`` puts the working directory first on the path: there, the old package is the one imported
        with working_directory(source):
            server = Server(*ARGS, "--store", f"sqlite:{store}", keys=(KEY,), env={"PYTHONPATH": str(source)})
    try:
        with server.client(KEY, base="/v1") as api:
            yield api
    finally:
        server.stop()


def ok(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


def create(api: httpx.Client, key: str | None = None, **body) -> dict:
    headers = {"Idempotency-Key": key} if key else {}
    return ok(api.post("/responses", json={"model": "m", **body}, headers=headers))


def make_records(api: httpx.Client) -> dict:
    """A chain with a tool call and a keyed turn, a branch with a deleted response and one without, a conversation
    with a deleted item (seen by the model) and a deleted queued item; the ids, by name."""
    ids = {}
    one = create(api, instructions="Be brief.", tools=TOOLS, input="What is the weather?")
    call = create(api, instructions="Be brief.", tools=TOOLS, input=CALL, previous_response_id=one["id"])
    [fc] = call["output"]
    assert fc["type"] == "function_call"
    answer = create(api, instructions="Be brief.", tools=TOOLS, previous_response_id=call["id"], input=[
        {"type": "function_call_output", "call_id": fc["call_id"], "output": '{"temperature": 21}'},
        {"role": "user", "content": "Warm, then."}])
    keyed = create(api, "key-1", instructions="Be brief.", tools=TOOLS, input="Thanks.",
                   previous_response_id=answer["id"])
    ids.update(one=one["id"], call=call["id"], answer=answer["id"], keyed=keyed["id"])
    branch = create(api, instructions="Be terse.", input="Another way", previous_response_id=call["id"])
    on = create(api, instructions="Be terse.", input="Go on", previous_response_id=branch["id"])
    assert ok(api.delete(f"/responses/{branch['id']}"))["deleted"]
    fork = create(api, instructions="Be brief.", tools=TOOLS, input="From the start", previous_response_id=one["id"])
    ids.update(branch=branch["id"], branch_on=on["id"], fork=fork["id"])
    conv = ok(api.post("/conversations", json={"items": [{"role": "user", "content": "kept"}],
                                                "metadata": {"k": "v"}}))
    first = create(api, conversation=conv["id"], input="answered")
    added = ok(api.post(f"/conversations/{conv['id']}/items", json={"items": [
        {"role": "user", "content": "first queued"}, {"role": "user", "content": "second queued"}]}))
    ok(api.delete(f"/conversations/{conv['id']}/items/{added['data'][0]['id']}"))  # not seen yet: the queue's
    second = create(api, conversation=conv["id"], input="after the queue")
    seen = ok(api.get(f"/conversations/{conv['id']}/items", params={"order": "asc"}))["data"][0]
    ok(api.delete(f"/conversations/{conv['id']}/items/{seen['id']}"))  # seen: the earlier responses are cut
    ids.update(conversation=conv["id"], conv_first=first["id"], conv_second=second["id"])
    return ids


def reads(api: httpx.Client, ids: dict) -> dict:
    """Every GET of the records: responses, their input items (both orders, paged), the conversation and its
    items, one by one; a deleted response's 404."""
    got = {}
    for name, rid in ids.items():
        if name == "conversation":
            continue
        response = api.get(f"/responses/{rid}")
        got[name] = (response.status_code, response.json())
        for params in ({"order": "asc", "limit": 100}, {"order": "desc", "limit": 2}):
            listing = api.get(f"/responses/{rid}/input_items", params=params)
            got[f"{name} input_items {params}"] = (listing.status_code, listing.json())
            if listing.status_code == 200 and listing.json()["has_more"]:
                after = {**params, "after": listing.json()["last_id"]}
                got[f"{name} input_items {after}"] = ok(api.get(f"/responses/{rid}/input_items", params=after))
    cid = ids["conversation"]
    got["conversation"] = ok(api.get(f"/conversations/{cid}"))
    items = ok(api.get(f"/conversations/{cid}/items", params={"order": "asc", "limit": 100}))
    got["items"] = items
    got["items desc"] = ok(api.get(f"/conversations/{cid}/items", params={"limit": 3}))
    for item in items["data"]:
        got[item["id"]] = ok(api.get(f"/conversations/{cid}/items/{item['id']}"))
    return got


def stored(path: Path) -> dict[str, dict]:
    """Every session of the SQLite file, as its store loads it."""
    store = SQLiteStore(path)
    try:
        return {info.id: store.load(info.id) for info in store.list(1000)}
    finally:
        store.close()


@pytest.fixture(scope="module")
def migrated(release_1, tmp_path_factory):
    """The store release 1 wrote and what it answered, then this tree serving it: (api, ids, release 1's reads,
    the records release 1 stored)."""
    store = tmp_path_factory.mktemp("store") / "sessions.db"
    with serving(store, release_1) as api:
        ids = make_records(api)
        before = reads(api, ids)
    records = stored(store)
    with serving(store) as api:
        yield api, ids, before, records


def test_release_1_wrote_format_1(migrated):
    """The records really are release 1's: the test would prove nothing against records in today's format."""
    _, ids, _, records = migrated
    ours = [r for r in records.values() if (r.get("extra") or {}).get("kind") in ("responses", "conversation")]
    assert len(ours) == 4  # the chain, two branches, the conversation
    assert all("format" not in r["extra"] and "head" in r["extra"] for r in ours)
    notes = [n for r in ours for n in r.get("notes", ())]
    assert notes and all({"s", "e", "at"} <= n.keys() for n in notes)
    assert any(isinstance(n.get("req"), dict) and "ref" in n["req"] for n in notes)
    assert any(r["extra"].get("origin") for r in ours) and any(r["extra"].get("cuts") for r in ours)


def test_every_read_answers_as_release_1_did(migrated):
    api, ids, before, _ = migrated
    after = reads(api, ids)
    assert after.keys() == before.keys()
    for name in before:
        assert after[name] == before[name], name
    assert before["branch"][0] == 404 and before["one"][0] == 200  # the deleted response stays deleted


def test_chains_and_conversations_go_on(migrated):
    api, ids, before, _ = migrated
    # the keyed turn, retried: the response release 1 stored, not a new turn
    retried = create(api, "key-1", instructions="Be brief.", tools=TOOLS, input="Thanks.",
                     previous_response_id=ids["answer"])
    assert retried == before["keyed"][1]
    # the chain's latest response extends its session, the older ones branch off it
    sid = ids["one"].split("_")[1]
    more = create(api, instructions="Be brief.", tools=TOOLS, input="More.", previous_response_id=ids["keyed"])
    assert more["id"] == f"resp_{sid}_4" and more["output"][0]["content"][0]["text"] == "More."
    listed = ok(api.get(f"/responses/{more['id']}/input_items", params={"order": "asc", "limit": 100}))["data"]
    old = before["keyed input_items {'order': 'asc', 'limit': 100}"][1]["data"]
    assert listed[:len(old)] == old and [i["type"] for i in listed[len(old):]] == ["message", "message"]
    branch_sid = ids["branch_on"].split("_")[1]
    extended = create(api, instructions="Be terse.", input="Further", previous_response_id=ids["branch_on"])
    assert extended["id"] == f"resp_{branch_sid}_2"
    off = create(api, instructions="Be terse.", input="Elsewhere", previous_response_id=ids["branch_on"])
    assert off["id"].split("_")[1] not in (sid, branch_sid)
    chain = ok(api.get(f"/responses/{off['id']}/input_items", params={"order": "asc", "limit": 100}))["data"]
    branch_items = before["branch_on input_items {'order': 'asc', 'limit': 100}"][1]["data"]
    assert chain[:len(branch_items)] == branch_items  # the branch of a branch keeps release 1's item ids
    # the conversation: a response cut by the deletion is gone, the latest goes on
    stale = api.post("/responses", json={"model": "m", "input": "x", "previous_response_id": ids["conv_first"]})
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "response_state_gone"
    cid = ids["conversation"]
    later = create(api, conversation=cid, input="after the upgrade")
    assert later["conversation"] == {"id": cid}
    items = ok(api.get(f"/conversations/{cid}/items", params={"order": "asc", "limit": 100}))["data"]
    assert items[:len(before["items"]["data"])] == before["items"]["data"]
    assert [i["content"][0]["text"] for i in items[len(before["items"]["data"]):]] == ["after the upgrade"] * 2
    # every old read is unchanged by the new format's notes and state written beside them
    assert ok(api.get(f"/responses/{ids['answer']}")) == before["answer"][1]
    assert ok(api.get(f"/conversations/{cid}")) == before["conversation"]
    assert ok(api.get(f"/responses/{later['id']}")) == later


# ---------------------------------------------------------------------------------------------- the codec
def test_format_1_records_read_as_release_1_meant_them():
    state = SessionState.from_json({"kind": "conversation", "head": 1, "removed": [4, 2], "cuts": [[3, 2]],
                                    "queue": [{"role": "user", "content": "q"}], "deleted": [1],
                                    "created_at": 7, "metadata": {"k": "v"}})
    assert state == SessionState("conversation", True, (2, 4), (Cut(3, 2),), ({"role": "user", "content": "q"},),
                                 (1,), (), 7, {"k": "v"})
    assert SessionState.from_json({"kind": "responses", "head": 0, "origin": [["a" * 32, 0, 3]]}).origin == (
        Run("a" * 32, 0, 3),)
    note = Note.from_json({"s": 2, "e": 5, "at": 1.5, "key": "k", "prev": "resp_x_0", "model": {"ref": 0},
                           "req": {"store": True}, "turn": {"finish_reason": "stop"}})
    assert note == Note(2, 5, 1.5, "k", "resp_x_0", Same(0), {"store": True}, None, None, {"finish_reason": "stop"})
    assert SessionState.from_json({}) is None and SessionState.from_json({"kind": "other"}) is None


def test_today_s_format_round_trips():
    state = SessionState("responses", True, (3,), (Cut(1, 3),), (), (0,), (Run("b" * 32, 1, 2),))
    assert state.to_json()["format"] == FORMAT and SessionState.from_json(state.to_json()) == state
    conversation = SessionState("conversation", queue=({"role": "user", "content": "x"},), created_at=9,
                                metadata={"a": "b"})
    assert SessionState.from_json(conversation.to_json()) == conversation
    note = Note(0, 2, 3.25, None, None, "m", Same(0), "Be brief.", [{"type": "function"}])
    assert Note.from_json(note.to_json()) == note and note.to_json()["request"] == {"same_as": 0}
    # a record holding dropped items is written in a format that a reader of formats 1 and 2 refuses
    truncated = SessionState("responses", dropped=(Dropped(0, 4),))
    assert truncated.to_json()["format"] == DROPPED_FORMAT and SessionState.from_json(truncated.to_json()) == truncated
    dropped = Note(4, 6, 1.0, dropped=(DroppedMessage(0, {"role": "user", "content": "hi"}),))
    assert dropped.to_json()["format"] == DROPPED_FORMAT and Note.from_json(dropped.to_json()) == dropped
    with pytest.raises(ValueError, match="format"):
        SessionState.from_json({"kind": "responses", "format": DROPPED_FORMAT + 1})
