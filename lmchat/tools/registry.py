"""The tool-call formats by name, and how to read a template's model's answers.

Each template class declares its model's output: ``tool_format`` (a name in
:data:`SYNTAX_TABLE`, ``plain`` by default) and ``reasoning`` (whether the answer
may open with ``<think>``); a subclass keeps its model's format. A model
without a built-in template is read through :class:`ResponseFormat` (GLM-4.6
by ``glm45``, GLM-4.5's format).
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs

from ..errors import ConfigError, LmchatError
from ..registry import as_template, template_class
from . import (
    chatglm3,
    command_r,
    deepseek_v3,
    firefunction,
    functionary,
    gemma4,
    glm4,
    glm45,
    granite,
    harmony,
    hermes,
    internlm,
    kimi_k2,
    llama3_json,
    mistral,
    phi4_mini,
    qwen3_coder,
)
from .base import Format
from .syntax import Syntax
from .think import CLOSE, OPEN

if TYPE_CHECKING:  # the templates import this package for their tool formats
    from ..templates.base import BaseTemplate

#: every tool-call syntax by name, each declared once in its module (its parser, grammar and read-back:
#: :class:`.syntax.Syntax`); what follows reads from here
SYNTAX_TABLE: dict[str, Syntax] = {s.name: s for s in (
    Syntax("plain", Format),
    hermes.SYNTAX,
    llama3_json.SYNTAX,
    mistral.SYNTAX,
    mistral.V11,
    mistral.GRANITE,
    granite.SYNTAX,
    internlm.SYNTAX,
    chatglm3.SYNTAX,
    glm4.SYNTAX,
    glm45.SYNTAX,
    deepseek_v3.SYNTAX,
    deepseek_v3.V31,
    kimi_k2.SYNTAX,
    command_r.SYNTAX,
    command_r.R7B,
    phi4_mini.SYNTAX,
    qwen3_coder.SYNTAX,
    functionary.V31,
    functionary.V32,
    firefunction.SYNTAX,
    harmony.SYNTAX,
    gemma4.SYNTAX,
)}
#: each syntax's parser
FORMATS: dict[str, type[Format]] = {name: s.parser for name, s in SYNTAX_TABLE.items()}


@attrs.frozen
class ResponseFormat:
    """How to read a model's answer: its tool-call format and whether it may open with ``<think>``."""

    tools: str = attrs.field(default="plain")
    reasoning: bool = False

    @tools.validator
    def _known(self, attribute: attrs.Attribute[str], value: str) -> None:
        if value not in FORMATS:
            raise ConfigError(f"unknown tool-call format {value!r} (known: {', '.join(FORMATS)})", field="tools")


#: a template as the parsers take it: by name, as an instance, or as the format of its model's answers alone
TemplateLike: TypeAlias = "str | BaseTemplate | ResponseFormat"


def response_format(template: TemplateLike) -> ResponseFormat:
    """The format of a template given by name, as an instance, or as a :class:`ResponseFormat`."""
    if isinstance(template, ResponseFormat):
        return template
    cls = template_class(template) if isinstance(template, str) else type(template)
    return ResponseFormat(cls.tool_format, cls.reasoning)


def output_markers(template: TemplateLike) -> tuple[str, ...]:
    """The markup a template's model writes in its own answers: tool-call markers, think tags.

    In an assistant message these are the model's format, so a token-level
    session encodes them as the tokenizer's marker ids, as the model generated
    them; anywhere else (a user's message, a tool result) they are text.
    """
    fmt = response_format(template)
    think = (OPEN, CLOSE) if fmt.reasoning and not FORMATS[fmt.tools].reasons else ()
    return tuple(dict.fromkeys((*FORMATS[fmt.tools].markers, *think)))


def prompt_opened(template: TemplateLike, prompt: str) -> bool | None:
    """Whether ``prompt`` (what an answer follows: its turn's delta) opened the reasoning channel of the
    template's format, for a format whose prompts may (``opened_by``: Gemma 4's after tool results); None for
    the others, whose parsers decide by the template (:func:`prompt_opens_think`)."""
    opening = FORMATS[response_format(template).tools].opened_by
    return prompt.endswith(opening) if opening else None


# template keywords are passed on to messages2prompt as a chat template reads them: Any, as there
def prompt_opens_think(template: TemplateLike, **template_kwargs: Any) -> bool:
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
