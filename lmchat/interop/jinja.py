"""Hugging Face Jinja chat templates, rendered exactly as transformers 5.x renders them.

:class:`JinjaTemplate` holds a ``chat_template`` source (and named templates such
as ``tool_use``) with the tokenizer's special tokens and the model's sampling
values. Rendering re-implements ``apply_chat_template(..., tokenize=False)`` in
an immutable *sandboxed* environment (:mod:`.jinja_env`): a chat template
is untrusted code that comes with a model download (cf. CVE-2024-34359).
Templates compile once per source string.

A Jinja template is one opaque program, so a session cannot render only the
newest turn: :meth:`JinjaTemplate.rerender_from` is 0, the session renders the
whole conversation and verifies that it extends what the engine holds.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import attrs

from ..errors import InvalidMessages, TemplateConfigError
from ..templates.base import BaseTemplate
from ..templates.chat import Chat
from .jinja_env import TemplateRenderError, compile_template, render_generation_spans, render_source

__all__ = ["JinjaTemplate", "TemplateRenderError", "compile_template", "render_source"]

#: end-of-turn markers a model emits itself, tried after the eos token when inferring ``eoa``
END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "</s>")
SENTINEL = "LMCHAT_SENTINEL_5e1f"


# ---------------------------------------------------------------------- field converters
# Any: an attrs converter takes whatever the field is given (a config's value); a wrong shape raises TypeError,
# which the template's field checks name. Template fields go by keyword (**sampling, **overrides) to the
# constructor, which checks them (templates/fields.py)
def _pairs(value: Any) -> tuple[tuple[str, str], ...]:
    """Mappings, ``[{"name", "template"}]`` lists or pairs as sorted (name, value) pairs, None values dropped."""
    if not value:
        return ()
    items: Iterable[tuple[Any, Any]]
    if isinstance(value, Mapping):
        items = value.items()
    else:
        items = [(v["name"], v["template"]) if isinstance(v, Mapping) else tuple(v) for v in value]
    return tuple(sorted((str(k), v) for k, v in items if v is not None))


@functools.lru_cache(maxsize=256)
def turn_markers(source: str, tokens: tuple[tuple[str, str], ...]) -> tuple[str, str]:
    """(lead, eoa) read off two probe renderings; ('', '') when there is no template or it rejects the probes.

    ``lead`` is what history puts between the generation prompt and an answer's
    content; ``eoa`` the end-of-turn marker right after the content, when it is
    the eos or a well-known end-of-turn token (the model emits it; the engine keeps it).
    """
    if not source:
        return "", ""
    probe = Chat([{"role": "user", "content": "X"}])
    answered = Chat([{"role": "user", "content": "X"}, {"role": "assistant", "content": SENTINEL}])
    answered.add_generation_prompt = False
    try:
        prompt = render_source(source, probe, dict(tokens))
        history = render_source(source, answered, dict(tokens))
    except InvalidMessages:
        return "", ""
    if SENTINEL not in history or not history.startswith(prompt):
        return "", ""
    at = history.index(SENTINEL)
    lead = history[len(prompt):at]
    after = history[at + len(SENTINEL):]
    eos = dict(tokens).get("eos_token")
    eoa = next((m for m in ((eos,) if eos else ()) + END_OF_TURN if after.startswith(m)), "")
    return lead, eoa


# ---------------------------------------------------------------------- the template
@attrs.frozen(kw_only=True)
class JinjaTemplate(BaseTemplate):
    """A Hugging Face ``chat_template`` with its special tokens and sampling values.

    ``lead`` and ``eoa`` left as None are inferred from the template; ``stop_words``
    left as None become ``eoa`` and the eos token.
    """

    hyperparameter_source = "the model's generation_config.json / config.json when loaded from a folder"
    supports_tools: ClassVar[bool] = True  # tools render exactly as the template renders them

    chat_template: str = ""  # the default template ('' when only named templates exist)
    named_templates: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    special_tokens: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    label: str | None = None  # where the template came from, for messages
    # None (the default) asks for inference from the template: __attrs_post_init__ sets a str before any
    # reader sees the instance, so BaseTemplate's str holds for every constructed template
    lead: str | None = None  # type: ignore[assignment]  # None only as a constructor argument (see above)
    eoa: str | None = None  # type: ignore[assignment]  # None only as a constructor argument (see above)

    def __attrs_post_init__(self) -> None:
        for source in (self.chat_template, *dict(self.named_templates).values()):
            compile_template(source)  # a syntax error surfaces here, not at the first prompt
        if self.lead is None or self.eoa is None:
            lead, eoa = turn_markers(self._default_source(), self.special_tokens)
            if self.lead is None:
                object.__setattr__(self, "lead", lead)
            if self.eoa is None:
                object.__setattr__(self, "eoa", eoa)
        if self.stop_words is None:
            words = tuple(dict.fromkeys(w for w in (self.eoa, self.tokens.get("eos_token")) if w))
            object.__setattr__(self, "stop_words", words or None)

    def _default_source(self) -> str:
        try:
            return self.select(None)
        except TemplateConfigError:  # only named templates, none of them the default
            return ""

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_string(cls, text: str, *, bos_token: str | None = None, eos_token: str | None = None,
                    name: str | None = None, **sampling: Any) -> JinjaTemplate:
        """A template from its Jinja source; ``sampling`` sets fields such as ``temperature``."""
        if not isinstance(text, str):
            raise TemplateConfigError(f"expected the template source as a string, got {type(text).__name__}")
        tokens = {"bos_token": bos_token, "eos_token": eos_token}
        return cls(chat_template=text, special_tokens=tokens, label=name, **sampling)

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike[str], **overrides: Any) -> JinjaTemplate:
        """A model folder: tokenizer_config.json, chat_template.jinja/.json, generation_config.json, config.json."""
        from .jinja_files import read_pretrained

        return cls(**{**read_pretrained(folder), **overrides})

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str], **overrides: Any) -> JinjaTemplate:
        """A GGUF file's ``tokenizer.chat_template`` with its bos/eos (needs the ``gguf`` package)."""
        from .jinja_files import read_gguf

        return cls(**{**read_gguf(path), **overrides})

    def evolve(self, **changes: Any) -> JinjaTemplate:
        # a new template source invalidates the inferred markers unless they are given
        if {"chat_template", "named_templates", "special_tokens"} & set(changes):
            changes = {"lead": None, "eoa": None, **changes}
        return attrs.evolve(self, **changes)

    # ------------------------------------------------------------------ rendering
    @property
    def tokens(self) -> dict[str, str]:
        return dict(self.special_tokens)

    @property
    def name(self) -> str:
        return self.registered_name or self.label or "jinja"

    def select(self, tools: object) -> str:
        """The source transformers would pick: ``tool_use`` when tools are given, else the default."""
        named = dict(self.named_templates)
        if tools is not None and "tool_use" in named:
            return named["tool_use"]
        if self.chat_template:
            return self.chat_template
        if "default" in named:
            return named["default"]
        raise TemplateConfigError(
            f"{self.name}: no default chat template (named templates: {', '.join(sorted(named)) or 'none'})"
        )

    def rerender_from(self, chat: Chat, n_old: int) -> int:
        return 0  # one opaque program: the session renders everything and checks the prefix

    def render_window(self, chat: Chat, start: int) -> tuple[str, list[int]]:
        if self.capability == "completion":
            return super().render_window(chat, start)
        text = render_source(self.select(chat.tools), chat, self.tokens)
        return text, [0] * len(chat.messages) + [len(text)]

    def generation_spans(self, chat: Chat) -> tuple[str, list[tuple[int, int]]] | None:
        """The rendering and its ``{% generation %}`` spans, or None when the template has no such blocks."""
        source = self.select(chat.tools)
        if "generation" not in source:
            return None
        return render_generation_spans(source, chat, self.tokens)

    def to_dict(self) -> dict[str, Any]:
        if self.registered_name is None:
            raise TemplateConfigError(
                f"{self.name}: register it with lmchat.register_template(name, template) to save sessions on it"
            )
        return super().to_dict()
