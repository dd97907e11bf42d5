"""The template registry: canonical names, aliases, and look-up by name.

``CHAT_TEMPLATES`` is an mmengine :class:`Registry`. lmchat reads it through
its public ``module_dict`` and fills it through ``register_module``, never
through ``Registry.get`` (nor ``in``, which calls ``get``): ``get`` logs every
look-up through MMLogger, which imports torch when it is installed (a second
of start-up), and ``lmchat render`` must start fast. For the same reason the
built-ins are imported by :func:`_ensure_loaded` rather than by mmengine's
``locations`` mechanism, which logs the same way; ``locations`` stays declared
so that ``CHAT_TEMPLATES.get(name)``, used from mmengine code, finds them too.
"""
from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import attrs
from mmengine.registry import Registry  # not `from mmengine import`: that imports torch

from .errors import TemplateConfigError, UnknownTemplate

if TYPE_CHECKING:  # the templates import this module to register
    from .templates.base import BaseTemplate

CHAT_TEMPLATES = Registry("templates", locations=["lmchat.templates"])

#: alias -> canonical name (LMDeploy's and XTuner's spellings)
ALIASES: dict[str, str] = {}

T = TypeVar("T", bound="type[BaseTemplate]")


def register(name: str, *aliases: str, force: bool = False) -> Callable[[T], T]:
    """Class decorator: register a template class under ``name`` and its aliases.

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


def template(name: str, *aliases: str, force: bool = False) -> Callable[[type], type]:
    """Class decorator declaring a template: a frozen attrs class, registered under ``name`` and its aliases.

    The attrs class is made first: it is a new class, and it is the one the
    registry must hold.
    """

    def deco(cls: type) -> type:
        return register(name, *aliases, force=force)(attrs.frozen(kw_only=True)(cls))

    return deco


def defaults_class(template: BaseTemplate, class_name: str, doc: str, **class_attrs: object) -> type:
    """A subclass of ``type(template)`` whose field defaults are ``template``'s values.

    Registered under a name, it makes ``get_template(name)`` equal to
    ``template`` while overrides work as for any template. It is slotted, as
    the built-ins are: a dict-based subclass would be shadowed by their slots.
    """
    base = type(template)
    defaults = {
        a.name: attrs.field(
            default=getattr(template, a.name), validator=a.validator, converter=a.converter, eq=a.eq, repr=a.repr
        )
        for a in attrs.fields(base)
    }
    return attrs.make_class(class_name, defaults, bases=(base,), frozen=True, kw_only=True, slots=True,
                            class_body={"__doc__": doc, **class_attrs})


def _owner(key: str) -> str | None:
    """The canonical template that ``key`` names (as a name or an alias), if any."""
    if key in CHAT_TEMPLATES.module_dict:
        return key
    return ALIASES.get(key)


@functools.cache
def _ensure_loaded() -> None:
    """Import the built-ins, once (re-entered while they register: the import is then under way)."""
    importlib.import_module("lmchat.templates")


def canonical_name(name: str) -> str:
    """Resolve an alias; raise :class:`UnknownTemplate` for unknown names."""
    _ensure_loaded()
    owner = _owner(name)
    if owner is None:
        raise UnknownTemplate(name, list(CHAT_TEMPLATES.module_dict) + list(ALIASES))
    return owner


def template_class(name: str) -> type[BaseTemplate]:
    cls: type[BaseTemplate] = CHAT_TEMPLATES.module_dict[canonical_name(name)]
    return cls


def get_template(name: str, **overrides: object) -> BaseTemplate:
    """An instance of the template registered as ``name`` (or an alias), with overrides."""
    from .templates.fields import with_overrides  # importing lmchat.templates registers the built-ins: at call time

    return with_overrides(template_class(name)(), overrides)


def as_template(template: str | BaseTemplate) -> BaseTemplate:
    """A template instance: ``template`` itself, or a new instance of the template registered under that name
    (what every API that takes a template name or instance works with)."""
    return get_template(template) if isinstance(template, str) else template


def template_names() -> list[str]:
    _ensure_loaded()
    return sorted(CHAT_TEMPLATES.module_dict)


def aliases_of(name: str) -> list[str]:
    return sorted(a for a, n in ALIASES.items() if n == name)
