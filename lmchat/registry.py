"""The template registry: canonical names, aliases, and look-up by name.

``CHAT_TEMPLATES`` is an mmengine :class:`Registry`; its ``locations`` make the
first look-up import :mod:`lmchat.templates`, which registers the built-ins.
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar

import attrs
from mmengine.registry import Registry  # not `from mmengine import`: that imports torch

from .errors import TemplateConfigError, UnknownTemplate

CHAT_TEMPLATES = Registry("templates", locations=["lmchat.templates"])

#: alias -> canonical name (LMDeploy's and XTuner's spellings)
ALIASES: dict[str, str] = {}

T = TypeVar("T", bound=type)


def register(name: str, *aliases: str, force: bool = False) -> Callable[[T], T]:
    """Class decorator: register a template under ``name`` and its aliases."""

    def deco(cls: T) -> T:
        cls.registered_name = name
        CHAT_TEMPLATES.register_module(name=name, module=cls, force=force)
        for alias in aliases:
            ALIASES[alias] = name
        return cls

    return deco


def _ensure_loaded() -> None:
    CHAT_TEMPLATES.import_from_location()


def canonical_name(name: str) -> str:
    """Resolve an alias; raise :class:`UnknownTemplate` for unknown names."""
    _ensure_loaded()
    if name in CHAT_TEMPLATES.module_dict:
        return name
    if name in ALIASES:
        return ALIASES[name]
    raise UnknownTemplate(name, list(CHAT_TEMPLATES.module_dict) + list(ALIASES))


def template_class(name: str) -> type:
    return CHAT_TEMPLATES.module_dict[canonical_name(name)]


def get_template(name: str, **overrides: Any):
    """An instance of the template registered as ``name`` (or an alias), with overrides."""
    cls = template_class(name)
    known = {a.name for a in attrs.fields(cls)}
    for key in overrides:
        if key not in known:
            raise TemplateConfigError(
                f"unknown field for template {name!r} (fields: {', '.join(sorted(known))})", field=key
            )
    try:
        return cls(**overrides)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, TemplateConfigError):
            raise
        raise TemplateConfigError(str(exc), source=f"template {name!r}") from exc


def template_names() -> list[str]:
    _ensure_loaded()
    return sorted(CHAT_TEMPLATES.module_dict)


def aliases_of(name: str) -> list[str]:
    return sorted(a for a, n in ALIASES.items() if n == name)
