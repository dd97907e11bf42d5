"""Every conversation whose official rendering is a golden vector, per built-in template.

* the battery (``lmchat.interop.battery``: plain, reasoning), with and without a generation prompt;
* the tool conversations for templates that render tools, with the tool list, ``None`` and ``[]``;
* seeded random conversations (``random_conversations.py``): 60 per template as the
  hypothesis test draws them, and 30 with tool calls and results (except where lmchat
  deliberately renders tools in the model's own format: ``OWN_TOOL_FORMAT``);
* the fixed conversations the family tests compare with the official template: the
  ``GOLDEN`` list of each module in ``FAMILY_MODULES``.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any, NamedTuple

from lmchat import template_names
from lmchat.interop.battery import PLAIN, REASONING, TOOL_CONVERSATIONS, TOOLS
from lmchat.registry import template_class

from .random_conversations import Draw

OFFICIAL = sorted(n for n in template_names() if template_class(n).official)
TOOL_TEMPLATES = [n for n in OFFICIAL if template_class(n).supports_tools]
#: templates that render tool calls and results in their model's own agent format, where the official
#: template ignores them (docs/tool-prompts.md): exact only on conversations without them
OWN_TOOL_FORMAT = ["chatglm3", "internlm2", "internlm2.5", "internlm3"]
RANDOM, RANDOM_TOOLS = 60, 30
FAMILY_MODULES = [
    "test_family_deepseek_phi", "test_family_glm_misc", "test_family_llama", "test_family_mistral_gemma",
    "test_tool_prompts", "test_cli", "test_continue_final", "test_qwen3_coder", "test_gpt_oss",
    "test_deepseek_v31", "test_mistral_family", "test_kimi_k2", "test_granite", "test_smollm3",
    "test_hermes_tool_use", "test_functionary", "test_firefunction",
    "test_single_families", "test_glm45",
    "test_phi_family", "test_command_r",
    "test_gemma4",
]


class Case(NamedTuple):
    name: str  # the built-in template
    label: str  # the conversation's name
    messages: list
    options: dict[str, Any]


def family_cases() -> Iterator[tuple[str, str, list, dict]]:
    """(group, template, messages, options) from the test modules' GOLDEN lists."""
    for module_name in FAMILY_MODULES:
        module = importlib.import_module(f"tests.{module_name}")
        group = module_name.removeprefix("test_").removeprefix("family_")
        for name, messages, options in module.GOLDEN:
            yield group, name, messages, options


def cases() -> Iterator[Case]:
    for name in OFFICIAL:
        for label, messages in {**PLAIN, **REASONING}.items():
            for generation_prompt in (True, False):
                yield Case(name, f"battery/{label}", messages, {"add_generation_prompt": generation_prompt})
        if name in TOOL_TEMPLATES:
            for label, messages in TOOL_CONVERSATIONS.items():
                for tools in (TOOLS, None, []):
                    for generation_prompt in (True, False):
                        options = {"add_generation_prompt": generation_prompt, "tools": tools}
                        yield Case(name, f"battery/{label}", messages, options)
        draw = Draw(f"golden/{name}")
        for i in range(RANDOM):
            yield Case(name, f"random/{name}/{i}", draw.conversation(), {"add_generation_prompt": draw.chance(0.75)})
        for i in range(RANDOM_TOOLS if name not in OWN_TOOL_FORMAT else 0):
            options = {"add_generation_prompt": draw.chance(0.75)}
            if name in TOOL_TEMPLATES:
                options["tools"] = draw.pick([TOOLS, None, []])
            yield Case(name, f"random-tools/{name}/{i}", draw.tool_conversation(), options)
    counts: dict[str, int] = {}
    for group, name, messages, options in family_cases():
        counts[group] = counts.get(group, 0) + 1
        yield Case(name, f"{group}/{counts[group] - 1}", messages, options)
