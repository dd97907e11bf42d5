"""The session invariant, for every registered template, under hypothesis."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

import lmchat
from lmchat import Session, get_template
from lmchat.registry import template_class

from .conversations import dialogues, plain_dialogues
from .hypothesis_profiles import examples

DATE = __import__("datetime").date(2024, 7, 26)
ALL = lmchat.template_names()
STABLE = [n for n in ALL if template_class(n).prefix_stable]


def play(name, system, turns, *, check_stable=False, roundtrip=False):
    """Replay a dialogue; answers are raw model output (``lead`` included when ``check_stable``)."""
    template = get_template(name)
    session = Session(template, system=system, date=DATE)
    messages = [] if system is None else [{"role": "system", "content": system}]
    for question, answer in turns:
        before = session.context
        messages.append({"role": "user", "content": question})
        try:
            full = template.messages2prompt(messages, date=DATE)
        except ValueError:
            with pytest.raises(ValueError):
                session.prompt(question)
            assert session.context == before, "a rejected prompt changed the session"
            assert len(session.messages) == len(messages) - 1
            return
        delta = session.prompt(question)
        if delta.reset:
            assert delta.text == full and delta.sequence_start
            assert not check_stable or not before, f"needless reset: {delta.reason}"
        else:
            assert before + delta.text == full
        assert session.context == full
        raw = template.lead + answer if check_stable else answer
        session.commit(raw)
        lead = template.lead
        messages.append({"role": "assistant", "content": raw[len(lead):] if lead and raw.startswith(lead) else raw})
        if roundtrip:
            session = Session.from_dict(json.loads(json.dumps(session.to_dict())))
            assert session.messages == lmchat.messages.normalize_messages(messages)


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dialogue=dialogues())
def test_delta_invariant(name, dialogue):
    play(name, *dialogue)


@pytest.mark.parametrize("name", STABLE)
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dialogue=plain_dialogues())
def test_prefix_stable_templates_never_reset(name, dialogue):
    play(name, *dialogue, check_stable=True, roundtrip=True)


def test_required_prefix_stable_families():
    for name in ("qwen", "qwen2.5", "internlm2", "llama3", "glm4", "smollm2", "yi", "hermes3"):
        assert name in STABLE, name
