"""Templates as data: LMDeploy configs, XTuner dicts and Jinja files, loaded and registered.

``load_template(spec)`` takes a registered name or alias, or a path:

* ``.json``: an LMDeploy ``ChatTemplateConfig`` (``model_name``, ``system``,
  ``eoh``, ...), an XTuner template dict (``INSTRUCTION``, ``SEP``, ...), or an
  object with a ``chat_template`` string (a Jinja template, as in
  ``tokenizer_config.json``), told apart by their keys;
* ``.jinja`` / ``.j2``: a Jinja chat template;
* a model folder (``tokenizer_config.json`` / ``chat_template.jinja``) or a
  ``.gguf`` file: the chat template the model ships.

``register_template(name, template)`` makes a loaded template available by
name, everywhere a built-in one is; ``saveable`` registers a file's template
under ``file:<path>`` so that sessions on it can be saved and resumed.
"""
from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

import attrs

from ..errors import LmchatError, TemplateConfigError, UnknownTemplate
from ..jsonfile import read_json
from ..registry import canonical_name, defaults_class, get_template, register, template_class
from ..templates.affix import AffixTemplate
from ..templates.base import BaseTemplate
from ..templates.fields import with_overrides
from ..templates.lmdeploy_twins import LMDEPLOY_TWINS
from ..templates.xtuner import XTUNER_KEYS, XTunerTemplate
from .jinja_files import named_templates

if TYPE_CHECKING:  # imported when a Jinja template is loaded (it pulls in jinja2)
    from .jinja import JinjaTemplate

#: LMDeploy ``ChatTemplateConfig`` field -> accepted JSON type (float fields take integers too)
LMDEPLOY_FIELDS: dict[str, type] = {
    "model_name": str,
    "system": str,
    "meta_instruction": str,
    "eosys": str,
    "user": str,
    "eoh": str,
    "assistant": str,
    "eoa": str,
    "separator": str,
    "capability": str,
    "stop_words": list,
    "session_len": int,
    "top_k": int,
    "top_p": float,
    "temperature": float,
    "repetition_penalty": float,
}
AFFIXES = ("system", "meta_instruction", "eosys", "user", "eoh", "assistant", "eoa", "separator")
#: LMDeploy fields lmchat's affix templates have no counterpart for (accepted when null)
UNSUPPORTED = {"tool": "LMDeploy's tool role", "eotool": "LMDeploy's tool role"}
JINJA_SUFFIXES = (".jinja", ".j2")


# Any: a config file's value, returned as the field it is checked for (its type is ``kind``, known at run time
# only); template fields and overrides go by keyword to the template, which checks them (templates/fields.py)
def _checked(key: str, value: Any, kind: type, source: str | None) -> Any:
    """``value`` if it has the JSON type ``kind`` (ints accepted, as floats, where floats are)."""
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok, value = True, float(value)
    if kind is list:
        ok = ok and all(isinstance(word, str) for word in value)
    if not ok:
        expected = "a list of strings" if kind is list else {str: "a string", int: "an integer"}.get(kind, "a number")
        raise TemplateConfigError(f"expected {expected}, got {value!r}", field=key, source=source)
    return value


@functools.cache
def _plain_class(model_name: str) -> type:
    """LMDeploy's ``BaseChatTemplate`` for an unregistered ``model_name``: prefix + content + suffix.

    Cached so that two loads of one config give equal templates.
    """
    return attrs.make_class(
        model_name,
        {},
        bases=(AffixTemplate,),
        frozen=True,
        kw_only=True,
        slots=True,
        class_body={
            "__doc__": f"LMDeploy chat template config {model_name!r}: affixes by role.",
            "hyperparameter_source": "the LMDeploy chat template config (LMDeploy defaults where it is silent)",
        },
    )


def template_from_lmdeploy_config(data: dict[str, Any], source: str | None = None) -> BaseTemplate:
    """An LMDeploy ``ChatTemplateConfig`` as a frozen template.

    As in LMDeploy, ``model_name`` names the registered template (or alias)
    to start from, the other fields override it, and null means "keep the
    default". An unregistered ``model_name`` starts from a plain
    :class:`AffixTemplate` (with no meta instruction unless one is given).
    ``vicuna``, ``wizardlm`` and ``baichuan2``, which lmchat registers from
    XTuner's dicts, name LMDeploy's own templates here, with LMDeploy's
    fields (:mod:`lmchat.templates.lmdeploy_twins`).
    """
    if not isinstance(data, dict):
        raise TemplateConfigError(f"expected a JSON object, got {type(data).__name__}", source=source)
    fields = {}
    for key, value in data.items():
        if key in UNSUPPORTED and value is not None:
            raise TemplateConfigError(f"{UNSUPPORTED[key]} is not supported", field=key, source=source)
        if key not in LMDEPLOY_FIELDS and key not in UNSUPPORTED:
            known = ", ".join(LMDEPLOY_FIELDS)
            reason = f"unknown LMDeploy chat template field (known: {known})"
            raise TemplateConfigError(reason, field=key, source=source)
        if value is not None and key in LMDEPLOY_FIELDS:
            fields[key] = _checked(key, value, LMDEPLOY_FIELDS[key], source)
    model_name = fields.pop("model_name", None)
    if model_name is None:
        reason = "missing (a registered template to start from, or a new name)"
        raise TemplateConfigError(reason, field="model_name", source=source)
    if fields.get("capability", "chat") not in ("chat", "completion"):
        reason = f"must be 'chat' or 'completion', got {fields['capability']!r}"
        raise TemplateConfigError(reason, field="capability", source=source)
    cls: type[BaseTemplate]
    if model_name in LMDEPLOY_TWINS:
        # LMDeploy's template of this name, not lmchat's XTuner one: the config was written for LMDeploy
        cls = LMDEPLOY_TWINS[model_name]
    else:
        try:
            cls = template_class(model_name)
        except UnknownTemplate:
            cls = _plain_class(model_name)
    given = [key for key in AFFIXES if key in fields]
    if given and issubclass(cls, XTunerTemplate):
        # XTuner templates render from their own format strings: the affixes would be ignored
        raise TemplateConfigError(
            f"{model_name!r} is an XTuner template; write its fields as an XTuner dict (SYSTEM, INSTRUCTION, ...)",
            field=given[0],
            source=source,
        )
    return with_overrides(cls(), fields, source)


def template_from_xtuner(data: dict[str, Any], source: str | None = None) -> XTunerTemplate:
    """An XTuner template dict (``SYSTEM``, ``INSTRUCTION``, ``SUFFIX``, ...) as a frozen template."""
    if not isinstance(data, dict):
        raise TemplateConfigError(f"expected a JSON object, got {type(data).__name__}", source=source)
    return XTunerTemplate.from_xtuner(data, source=source)


def _from_json(path: str) -> BaseTemplate:
    data = read_json(path, TemplateConfigError)
    if not isinstance(data, dict):
        raise TemplateConfigError(f"expected a JSON object, got {type(data).__name__}", source=path)
    if "chat_template" in data:
        named = named_templates(data["chat_template"], path)
        if "default" not in named:
            raise TemplateConfigError("no template named 'default'", field="chat_template", source=path)
        return _jinja().from_string(named["default"])
    if any(key in XTUNER_KEYS for key in data):
        return template_from_xtuner(data, source=path)
    return template_from_lmdeploy_config(data, source=path)


def _jinja() -> type[JinjaTemplate]:
    """The Jinja template class, imported only when a Jinja template is loaded (it pulls in jinja2)."""
    from .jinja import JinjaTemplate

    return JinjaTemplate


def load_template_path(path: str, **overrides: Any) -> BaseTemplate:
    """The template a file or model folder describes (see the module docstring), with overrides."""
    template: BaseTemplate
    if os.path.isdir(path):
        template = _jinja().from_pretrained(path)
    elif not os.path.exists(path):
        raise FileNotFoundError(2, "no such chat template file or folder", path)
    elif path.endswith(".json"):
        template = _from_json(path)
    elif path.endswith(JINJA_SUFFIXES):
        with open(path, encoding="utf-8", newline="") as f:  # newline='': the text byte for byte
            template = _jinja().from_string(f.read(), name=os.path.splitext(os.path.basename(path))[0])
    elif path.endswith(".gguf"):
        template = _jinja().from_gguf(path)
    else:
        expected = "expected .json, .jinja, .j2, .gguf or a model folder"
        raise TemplateConfigError(f"unsupported chat template file: {expected}", source=path)
    return with_overrides(template, overrides, path)


def load_template(spec: str, **overrides: Any) -> BaseTemplate:
    """A registered template (name or alias) or one loaded from a path, with field overrides.

    A registered name wins over a file of the same name in the working
    directory; an unknown name that does not look like a path is an
    :class:`UnknownTemplate` error with suggestions.
    """
    try:
        canonical_name(spec)
    except UnknownTemplate:
        looks_like_path = os.path.exists(spec) or os.sep in spec or spec.endswith((".json", ".gguf", *JINJA_SUFFIXES))
        if looks_like_path:
            return load_template_path(spec, **overrides)
        raise
    return get_template(spec, **overrides)


def register_template(name: str, template: BaseTemplate, *aliases: str, force: bool = False) -> BaseTemplate:
    """Register ``template`` as ``name`` (and aliases); returns ``get_template(name)``.

    The registered class is a subclass of the template's class whose field
    defaults are the template's values, so ``get_template(name)`` returns a
    template with the same fields, overrides work as for a built-in, and a
    saved session names it. Replacing a registered name needs ``force=True``.
    The class claims no official template: matching never picks it by
    fingerprint.
    """
    cls = defaults_class(
        template,
        name,
        f"Registered at run time from template {template.name!r}.",
        official=None,
        hyperparameter_source=f"given at registration (from template {template.name!r})",
    )
    register(name, *aliases, force=force)(cls)
    return get_template(name)


def saveable(template: BaseTemplate, source: str) -> BaseTemplate:
    """``template`` such that sessions on it round-trip through ``to_dict``.

    A template loaded from a file has no registered name, so a snapshot could
    not name it; it is registered as ``file:<absolute path>`` (again on each
    start, so ``--chat-template FILE --resume`` restores its sessions).
    """
    try:
        if BaseTemplate.from_dict(template.to_dict()) == template:
            return template
    except LmchatError:
        pass  # not registered under its name: register it below
    return register_template(f"file:{os.path.abspath(source)}", template, force=True)
