"""The tool-call formats by name, and how to read a template's model's answers.

Each template class declares its model's output: ``tool_format`` (a name in
:data:`FORMATS`, ``plain`` by default) and ``reasoning`` (whether the answer
may open with ``<think>``); a subclass keeps its model's format. A model
without a built-in template is read through :class:`ResponseFormat` (GLM-4.6
by ``glm45``, GLM-4.5's format).
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import attrs

from ..errors import ConfigError, LmchatError
from ..registry import as_template, template_class
from .base import Format
from .chatglm3 import ChatGLM3
from .command_r import CommandR, CommandR7B
from .deepseek_v3 import DeepSeekV3, DeepSeekV31
from .firefunction import FirefunctionV2
from .functionary import FunctionaryV31, FunctionaryV32
from .gemma4 import Gemma4
from .glm4 import GLM4
from .glm45 import Glm45
from .granite import Granite33
from .harmony import Harmony
from .hermes import Hermes
from .internlm import InternLM
from .kimi_k2 import KimiK2
from .llama3_json import Llama3Json
from .mistral import Granite, Mistral, MistralV11
from .phi4_mini import Phi4Mini
from .qwen3_coder import Qwen3Coder
from .think import CLOSE, OPEN

if TYPE_CHECKING:  # the templates import this package for their tool formats
    from ..templates.base import BaseTemplate

FORMATS: dict[str, type[Format]] = {
    "plain": Format,
    "hermes": Hermes,
    "llama3_json": Llama3Json,
    "mistral": Mistral,
    "mistral_v11": MistralV11,
    "granite": Granite,
    "granite33": Granite33,
    "internlm": InternLM,
    "chatglm3": ChatGLM3,
    "glm4": GLM4,
    "glm45": Glm45,
    "deepseek_v3": DeepSeekV3,
    "deepseek_v31": DeepSeekV31,
    "kimi_k2": KimiK2,
    "command_r": CommandR,
    "command_r7b": CommandR7B,
    "phi4_mini": Phi4Mini,
    "qwen3_coder": Qwen3Coder,
    "functionary_v3_1": FunctionaryV31,
    "functionary_v3_2": FunctionaryV32,
    "firefunction_v2": FirefunctionV2,
    "harmony": Harmony,
    "gemma4": Gemma4,
}


@attrs.frozen
class ResponseFormat:
    """How to read a model's answer: its tool-call format and whether it may open with ``<think>``."""

    tools: str = attrs.field(default="plain")
    reasoning: bool = False

    @tools.validator
    def _known(self, attribute: attrs.Attribute[str], value: str) -> None:
        if value not in FORMATS:
            raise ConfigError(f"unknown tool-call format {value!r} (known: {', '.join(FORMATS)})", field="tools")


def response_format(template: Any) -> ResponseFormat:
    """The format of a template given by name, as an instance, or as a :class:`ResponseFormat`."""
    if isinstance(template, ResponseFormat):
        return template
    cls = template_class(template) if isinstance(template, str) else type(template)
    return ResponseFormat(cls.tool_format, cls.reasoning)


def output_markers(template: Any) -> tuple[str, ...]:
    """The markup a template's model writes in its own answers: tool-call markers, think tags.

    In an assistant message these are the model's format, so a token-level
    session encodes them as the tokenizer's marker ids, as the model generated
    them; anywhere else (a user's message, a tool result) they are text.
    """
    fmt = response_format(template)
    think = (OPEN, CLOSE) if fmt.reasoning and not FORMATS[fmt.tools].reasons else ()
    return tuple(dict.fromkeys((*FORMATS[fmt.tools].markers, *think)))


def prompt_opened(template: Any, prompt: str) -> bool | None:
    """Whether ``prompt`` (what an answer follows: its turn's delta) opened the reasoning channel of the
    template's format, for a format whose prompts may (``opened_by``: Gemma 4's after tool results); None for
    the others, whose parsers decide by the template (:func:`prompt_opens_think`)."""
    opening = FORMATS[response_format(template).tools].opened_by
    return prompt.endswith(opening) if opening else None


def prompt_opens_think(template: Any, **template_kwargs: Any) -> bool:
    """Whether the template's generation prompt leaves a ``<think>`` block open (QwQ; not Qwen3).

    Read from the rendered prompt of a one-message conversation, so a template
    keyword such as Qwen3's ``enable_thinking=False`` (an empty, closed block)
    counts. Templates are frozen: the answer is kept per template and keywords.
    """
    if isinstance(template, ResponseFormat):
        return False
    if FORMATS[response_format(template).tools].reasons:
        return False  # its reasoning is a channel of its own, not a <think> block
    template = as_template(template)
    try:
        return _opens_think(template, tuple(sorted(template_kwargs.items())))
    except TypeError:  # a keyword's value that cannot be a key (a list of tools): render it
        return _renders_open_think(template, template_kwargs)


@functools.lru_cache(maxsize=256)
def _opens_think(template: BaseTemplate, template_kwargs: tuple[tuple[str, Any], ...]) -> bool:
    return _renders_open_think(template, dict(template_kwargs))


def _renders_open_think(template: BaseTemplate, template_kwargs: dict[str, Any]) -> bool:
    try:
        prompt = template.messages2prompt([{"role": "user", "content": "."}], **template_kwargs)
    except LmchatError:  # a template that cannot render this conversation does not open a block
        return False
    return prompt.rfind(OPEN) > prompt.rfind(CLOSE)
