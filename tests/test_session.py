"""Session behaviour beyond the invariant: lifecycle, persistence, bad input."""
from __future__ import annotations

import datetime as dt
import json

import pytest

import lmchat
from lmchat import InvalidMessages, Session, SessionError, SessionPolicy, get_template

DATE = dt.date(2024, 7, 26)


def test_first_delta_starts_the_sequence_and_later_ones_extend_it():
    s = Session("qwen", session_id="abc")
    d1 = s.prompt("Hi")
    assert d1.sequence_start and not d1.reset
    assert d1.text == get_template("qwen").messages2prompt([{"role": "user", "content": "Hi"}])
    s.commit("Hello!")
    d2 = s.prompt("Bye")
    assert not d2.sequence_start and not d2.reset
    assert d2.text == "\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"
    assert s.step == len(s.context) and s.session_id == "abc" and s.turns == 1


def test_commit_keeps_the_models_end_marker_in_the_context():
    s = Session("internlm2")
    s.prompt("Hi")
    s.commit("Hello")
    assert s.context.endswith("<|im_start|>assistant\nHello<|im_end|>")
    assert s.messages[-1] == {"role": "assistant", "content": "Hello"}


def test_commit_without_prompt_is_an_error():
    s = Session("qwen")
    with pytest.raises(SessionError, match="without a pending prompt"):
        s.commit("x")
    s.prompt("q")
    s.commit("a")
    with pytest.raises(SessionError):
        s.commit("again")


def test_bad_input_loses_nothing():
    s = Session("qwen")
    s.prompt("Hi")
    s.commit("Hello")
    before, messages = s.context, s.messages
    with pytest.raises(InvalidMessages) as err:
        s.prompt(["not", "text"])
    assert err.value.index == 2 and err.value.field.startswith("content")
    with pytest.raises(InvalidMessages, match="role"):
        s.extend([{"content": "no role"}])
    assert s.context == before and s.messages == messages
    assert not s.prompt("Fine").reset


def test_undo_drops_the_last_exchange_and_the_next_delta_resets():
    t = get_template("qwen")
    s = Session(t)
    s.prompt("one")
    s.commit("1")
    s.prompt("two")
    s.commit("2")
    dropped = s.undo()
    assert [m["content"] for m in dropped] == ["two", "2"]
    d = s.prompt("three")
    assert d.reset and d.sequence_start and d.reason == "reset requested"
    assert d.text == t.messages2prompt([{"role": "user", "content": "one"}, {"role": "assistant", "content": "1"},
                                        {"role": "user", "content": "three"}])
    with pytest.raises(SessionError):
        Session(t).undo()


def test_reset_keeps_system_prompt_and_starts_a_new_sequence():
    s = Session("qwen", system="Be brief.")
    s.prompt("one")
    s.commit("1")
    s.reset()
    assert s.messages == [{"role": "system", "content": "Be brief."}]
    d = s.prompt("two")
    assert d.reset and d.sequence_start and d.text.startswith("<|im_start|>system\nBe brief.")


def test_to_dict_round_trips_through_json_mid_turn():
    s = Session("qwen3", system="sys", date=DATE, template_kwargs={"enable_thinking": False})
    s.prompt("q1")
    s.commit("<think>\nx\n</think>\n\na1")
    s.prompt("q2")  # pending
    data = json.loads(json.dumps(s.to_dict()))
    r = Session.from_dict(data)
    assert r.context == s.context and r.messages == s.messages and r.pending
    assert r.template == s.template and r.date == DATE and r.template_kwargs == {"enable_thinking": False}
    r.commit("a2")
    s.commit("a2")
    assert r.prompt("q3") == s.prompt("q3")


def test_from_dict_rejects_unknown_versions():
    data = Session("qwen").to_dict()
    data["version"] = 99
    with pytest.raises(SessionError, match="version"):
        Session.from_dict(data)


def test_date_is_frozen_per_session():
    s = Session("qwen")
    assert s.date == dt.date.today()
    assert Session("qwen", date=dt.datetime(2020, 1, 2, 3, 4)).date == dt.date(2020, 1, 2)


def test_history_rewrite_is_flagged_with_a_reason():
    s = Session("qwen3", date=DATE)
    s.prompt("2+2?")
    s.commit("<think>\nadd\n</think>\n\n4")
    d = s.prompt("3+3?")
    assert d.reset and "offset" in d.reason
    assert d.text == s.context


def test_tool_results_extend_one_delta():
    s = Session("qwen2.5", tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    s.prompt("call f twice")
    s.commit('<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>')
    d = s.extend([{"role": "tool", "content": "1"}, {"role": "tool", "content": "2"}])
    assert not d.reset
    assert d.text == ("\n<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response>"
                      "<|im_end|>\n<|im_start|>assistant\n")


def test_unknown_template_lists_close_names():
    with pytest.raises(lmchat.UnknownTemplate) as err:
        Session("qwen25")
    assert "qwen2.5" in str(err.value) or "qwen2d5" in str(err.value)
    assert isinstance(err.value, KeyError)


def test_template_overrides_and_unknown_fields():
    t = get_template("qwen", temperature=0.1, stop_words=["x"])
    assert t.temperature == 0.1 and t.stop_words == ("x",)
    assert get_template("qwen").temperature == 0.7  # templates are frozen and independent
    with pytest.raises(lmchat.TemplateConfigError, match="tempreature"):
        get_template("qwen", tempreature=0.1)
    with pytest.raises(lmchat.TemplateConfigError, match="capability"):
        get_template("qwen", capability="vision")
    assert lmchat.BaseTemplate.from_dict(t.to_dict()) == t


def test_continuation_without_sequence_start():
    t = get_template("qwen")
    assert t.messages2prompt([{"role": "user", "content": "x"}], sequence_start=False) == t.decorate_prompt("x", False)
    assert t.decorate_prompt("x", False) == "\n<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"


def test_every_constructor_option_survives_a_snapshot():
    """Iterates over Session's parameters and its policy's fields: a new option that a snapshot forgets fails
    here."""
    import datetime
    import inspect

    import attrs

    from . import tokenizers_fixtures as tf

    given = {
        "system": "Be brief.", "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "date": datetime.date(2020, 2, 29), "session_id": "s-1", "template_kwargs": {"enable_thinking": False},
        "tokenizer": tf.smollm2(),
    }
    policy = {"session_len": 1234, "overflow": "shift", "max_new_tokens": 7, "injection": "reject",
              "max_message_chars": 99, "drift": "keep", "overflow_room": 0.5}
    parameters = [p for p in inspect.signature(Session.__init__).parameters if p not in ("self", "template")]
    assert sorted(parameters) == sorted([*given, "policy"]), "a new Session option: give it a value here"
    assert sorted(a.name for a in attrs.fields(SessionPolicy)) == sorted(policy), "a new policy field: give it one"
    session = Session("qwen3", **given, policy=SessionPolicy(**policy))
    back = Session.from_dict(json.loads(json.dumps(session.to_dict())), tokenizer=given["tokenizer"])
    for name, value in {**given, **policy}.items():
        if name == "tokenizer":
            assert back.context_ids is not None
        elif name == "system":
            assert back.messages[0] == {"role": "system", "content": value}
        else:
            assert getattr(back, name) == value, name
    snapshot = session.to_dict()  # shares nothing with the session
    snapshot["messages"].append({"role": "user", "content": "sneaky"})
    snapshot["tools"].clear()
    snapshot["template_kwargs"]["x"] = 1
    assert len(session.messages) == 1 and session.tools and "x" not in session.template_kwargs
