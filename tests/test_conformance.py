"""Every catalogue template renders byte-exactly what its official Jinja template renders.

Fixed conversations are checked against the committed golden vectors
(``tests/test_golden.py`` checks all of them; ``assert_same`` checks one, for the family
tests); random ones, drawn by hypothesis, against the oracle itself where the corpus is.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

import lmchat
from lmchat.registry import template_class

from . import golden, oracle
from .conversations import conversations
from .hypothesis_profiles import examples

OFFICIAL = sorted(n for n in lmchat.template_names() if template_class(n).official)


def assert_same(name, messages, **options):
    """lmchat renders what the official template renders for a fixed conversation (a golden vector),
    or raises a ValueError where it raised; returns the text, or 'rejected: <its error>'."""
    cls = template_class(name)
    options.setdefault("date", oracle.DATE)
    try:
        expected = golden.expected(name, messages, **options)
    except golden.Rejected as exc:
        with pytest.raises(ValueError):
            cls().messages2prompt(messages, **options)
        return f"rejected: {exc}"
    got = cls().messages2prompt(messages, **options)
    assert got == expected, f"{name} differs from {cls.official}"
    return got


def assert_same_as_oracle(name, messages, **options):
    """Like assert_same for any conversation, rendered by the oracle (skips without the corpus)."""
    cls = template_class(name)
    outcome = golden.official_outcome(cls, messages, options)
    if "error" in outcome:
        with pytest.raises(ValueError):
            cls().messages2prompt(messages, date=oracle.DATE, **options)
        return f"rejected: {outcome['error']}"
    got = cls().messages2prompt(messages, date=oracle.DATE, **options)
    assert got == outcome["text"], f"{name} differs from {cls.official}"
    return got


@oracle.needs_oracle_for_random
@pytest.mark.parametrize("name", OFFICIAL)
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=conversations())
def test_random_conversations(name, messages):
    assert_same_as_oracle(name, messages, add_generation_prompt=True)


def test_catalogue_is_complete():
    required = [
        "internlm2", "internlm2.5", "internlm3", "chatglm3", "glm4", "llama2", "llama3", "llama3.1", "llama3.2",
        "mistral", "mixtral", "mistral-v0.3", "qwen", "qwen2.5", "qwen3", "qwq", "gemma", "gemma2", "gemma3",
        "deepseek", "deepseek-coder", "deepseek-v2", "deepseek-v3", "deepseek-r1", "yi", "zephyr", "phi3", "phi4",
        "smollm2", "falcon3", "granite3", "tinyllama", "openchat", "solar", "hermes3",
    ]
    missing = [n for n in required if n not in OFFICIAL]
    assert not missing, f"catalogue templates without an official counterpart: {missing}"
