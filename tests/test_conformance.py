"""Every catalogue template renders byte-exactly what its official Jinja template renders."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

import lmchat
from lmchat.registry import template_class

from . import oracle
from .conversations import PLAIN, REASONING, TOOL_CONVERSATIONS, TOOLS, conversations

pytestmark = oracle.needs_corpus

OFFICIAL = sorted(n for n in lmchat.template_names() if template_class(n).official)
TOOL_TEMPLATES = [n for n in OFFICIAL if template_class(n).supports_tools]


def assert_same(name, messages, **options):
    cls = template_class(name)
    try:
        expected = oracle.render(cls, messages, **options)
    except Exception as exc:  # the official template rejects this conversation
        with pytest.raises(ValueError):
            cls().messages2prompt(messages, date=oracle.DATE, **options)
        return f"rejected: {exc}"
    got = cls().messages2prompt(messages, date=oracle.DATE, **options)
    assert got == expected, f"{name} differs from {cls.official}"
    return got


@pytest.mark.parametrize("name", OFFICIAL)
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_battery(name, generation_prompt):
    for label, messages in {**PLAIN, **REASONING}.items():
        try:
            assert_same(name, messages, add_generation_prompt=generation_prompt)
        except AssertionError as exc:
            raise AssertionError(f"conversation {label!r}: {exc}") from exc


@pytest.mark.parametrize("name", TOOL_TEMPLATES)
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_tools(name, generation_prompt):
    for label, messages in TOOL_CONVERSATIONS.items():
        for tools in (TOOLS, None, []):
            try:
                assert_same(name, messages, add_generation_prompt=generation_prompt, tools=tools)
            except AssertionError as exc:
                raise AssertionError(f"conversation {label!r} tools={bool(tools)}: {exc}") from exc


@pytest.mark.parametrize("name", OFFICIAL)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=conversations())
def test_random_conversations(name, messages):
    assert_same(name, messages, add_generation_prompt=True)


def test_catalogue_is_complete():
    required = (
        "internlm2 internlm2.5 internlm3 chatglm3 glm4 llama2 llama3 llama3.1 llama3.2 mistral mixtral "
        "mistral-v0.3 qwen qwen2.5 qwen3 qwq gemma gemma2 gemma3 deepseek deepseek-coder deepseek-v2 "
        "deepseek-v3 deepseek-r1 yi zephyr phi3 phi4 smollm2 falcon3 granite3 tinyllama openchat solar hermes3"
    ).split()
    missing = [n for n in required if n not in OFFICIAL]
    assert not missing, f"catalogue templates without an official counterpart: {missing}"
