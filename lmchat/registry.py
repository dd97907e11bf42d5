"""The template registry: canonical names, aliases, and look-up by name.

``CHAT_TEMPLATES`` is an mmengine :class:`Registry`; its ``locations`` make the
first look-up import :mod:`lmchat.templates`, which registers the built-ins.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, TypeVar

import attrs
from mmengine.registry import Registry  # not `from mmengine import`: that imports torch

from .errors import TemplateConfigError, UnknownTemplate

CHAT_TEMPLATES = Registry("templates", locations=["lmchat.templates"])

#: alias -> canonical name (LMDeploy's and XTuner's spellings)
ALIASES: dict[str, str] = {}

T = TypeVar("T", bound=type)


def register(name: str, *aliases: str, force: bool = False) -> Callable[[T], T]:
    """Class decorator: register a template under ``name`` and its aliases.

    A name or alias already in use is an error unless ``force=True``: a user's
    template must never silently replace a built-in (or shadow it through an
    alias). With ``force`` the new class takes the name over, together with the
    aliases that pointed to it.
    """

    def deco(cls: T) -> T:
        _ensure_loaded()  # the built-ins must be there to be protected
        for alias in aliases:
            if alias in CHAT_TEMPLATES.module_dict:
                raise TemplateConfigError(
                    f"{alias!r} is a template name and cannot become an alias; "
                    "register under that name with force=True to replace it",
                    field="aliases",
                )
        taken = [key for key in (name, *aliases) if _owner(key) is not None]
        if taken and not force:
            owners = ", ".join(f"{key!r} (template {_owner(key)!r})" for key in taken)
            raise TemplateConfigError(f"already registered: {owners}; pass force=True to replace", field="name")
        cls.registered_name = name
        CHAT_TEMPLATES.register_module(name=name, module=cls, force=True)
        ALIASES.pop(name, None)  # a canonical name outranks an alias spelled the same
        for alias in aliases:
            ALIASES[alias] = name
        return cls

    return deco


def _owner(key: str) -> str | None:
    """The canonical template that ``key`` names (as a name or an alias), if any."""
    if key in CHAT_TEMPLATES.module_dict:
        return key
    return ALIASES.get(key)


def _ensure_loaded() -> None:
    """Import the built-ins once.

    Done here rather than by ``Registry.import_from_location``, which logs
    through MMLogger and so imports torch (a second of start-up) when it is
    installed; ``lmchat render`` must start fast.
    """
    if not CHAT_TEMPLATES._imported:
        CHAT_TEMPLATES._imported = True
        importlib.import_module("lmchat.templates")


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
        template = cls(**overrides)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, TemplateConfigError):
            raise
        raise TemplateConfigError(str(exc), source=f"template {name!r}") from exc
    if overrides:
        from .templates.fields import check_overrides  # rendering probes, once per template value

        check_overrides(cls(), overrides)
    return template


def template_names() -> list[str]:
    _ensure_loaded()
    return sorted(CHAT_TEMPLATES.module_dict)


def aliases_of(name: str) -> list[str]:
    return sorted(a for a, n in ALIASES.items() if n == name)
