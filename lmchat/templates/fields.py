"""Which fields of a template class its rendering honours, so an override is never silently ignored.

Code templates (Llama, Mistral, GLM, DeepSeek...) render their official format
from code, and several of the LMDeploy-style fields they inherit
(``system``, ``user``, ``eoh``...) play no part in it. Whether a field is
honoured is found by rendering probe conversations with the field set to a
sentinel: if no rendering changes, the class ignores it. An override of an
ignored field is refused with :class:`TemplateConfigError` naming it, with
one exception: ``meta_instruction`` on a template that renders system
messages becomes its default system prompt (see
:attr:`BaseTemplate.default_system`).
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from ..errors import LmchatError, TemplateConfigError
from ..messages import normalize_messages
from .chat import Chat
from .sampling import SAMPLING_FIELDS

if TYPE_CHECKING:  # base imports this module
    from .base import BaseTemplate

#: a template class, kept by with_overrides
T = TypeVar("T", bound="BaseTemplate")

#: fields a session reads rather than the renderer (``lead``) and labels: always accepted
NOT_RENDERED = frozenset({"lead", "label", "hf_special_tokens"})
_SENTINEL = "\u2063§"

_PROBES: tuple[tuple[list[dict[str, str]], bool], ...] = (
    ([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
      {"role": "assistant", "content": "a"}, {"role": "user", "content": "v"}], True),
    ([{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}], False),
    ([{"role": "user", "content": "u"}], True),
)


def _renderings(template: BaseTemplate) -> tuple[str | None, ...]:
    out: list[str | None] = []
    for messages, generation in _PROBES:
        try:
            # a Chat of its own: make_chat would add the default system prompt, which asks what is honoured
            out.append(template.render(Chat(normalize_messages(messages), add_generation_prompt=generation)))
        except LmchatError:
            out.append(None)  # the template refuses this conversation
    return tuple(out)


@functools.lru_cache(maxsize=256)
def honoured(base: BaseTemplate) -> frozenset[str]:
    """The string fields of the template ``base`` whose value changes what it renders."""
    reference = _renderings(base)
    found = set()
    for a in attrs.fields(type(base)):
        value = getattr(base, a.name)
        if a.name in SAMPLING_FIELDS or not (value is None or isinstance(value, str)):
            continue
        try:
            # Any here: template field values (overrides from a file or the command line, of each field's type)
            change: dict[str, Any] = {a.name: (value or "") + _SENTINEL}
            probe = attrs.evolve(base, **change)
        except (TypeError, ValueError):
            continue
        if _renderings(probe) != reference:
            found.add(a.name)
    return frozenset(found)


@functools.lru_cache(maxsize=256)
def renders_system(base: BaseTemplate) -> bool:
    """Whether the template renders a conversation that opens with a system message."""
    return _renderings(base)[0] is not None


def with_overrides(template: T, overrides: Mapping[str, Any], source: str | None = None) -> T:
    """``template`` with field overrides, every one checked.

    An unknown field, a value the field refuses, or a field the template would
    ignore is a :class:`TemplateConfigError` naming the field (and ``source``).
    """
    if not overrides:
        return template
    known = {a.name for a in attrs.fields(type(template))}
    for key in overrides:
        if key not in known:
            reason = f"unknown field for template {template.name!r} (fields: {', '.join(sorted(known))})"
            raise TemplateConfigError(reason, field=key, source=source)
    try:
        evolved = attrs.evolve(template, **overrides)
    except TemplateConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise TemplateConfigError(str(exc), source=source or f"template {template.name!r}") from exc
    check_overrides(template, overrides, source)
    return evolved


def check_overrides(base: BaseTemplate, overrides: Mapping[str, Any], source: str | None = None) -> None:
    """Refuse an override of the template ``base`` that it would ignore (its own value is no change)."""
    for key, value in overrides.items():
        if key in SAMPLING_FIELDS or key in NOT_RENDERED or value == getattr(base, key, value):
            continue
        if key in honoured(base):
            continue
        if key == "meta_instruction" and (value is None or renders_system(base)):
            continue  # becomes the default system prompt (BaseTemplate.default_system)
        why = ("it renders no system message, so it has no default system prompt" if key == "meta_instruction"
               else "it renders its official format from code and this field plays no part in it")
        raise TemplateConfigError(f"template {base.name!r} cannot honour this field: {why}", field=key, source=source)
