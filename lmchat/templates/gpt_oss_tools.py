"""gpt-oss's tools as its official template renders them: a TypeScript-like ``namespace functions``, each
JSON schema type written as the template's ``render_typescript_type`` macro writes it, read from the data as
Jinja reads it (undefined keys, the ``items`` attribute fallback, its whitespace). :mod:`.gpt_oss` is the
template.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..errors import InvalidMessages
from ..jsontypes import JSON
from .render_utils import jstr, tojson

#: the text between ``{{- ": " }}`` and ``{{ render_typescript_type(...) }}`` of a nested property (the
#: official file prints its line break and indentation: lstrip_blocks strips only before block tags)
NESTED_GAP = "\n" + " " * 16
#: the same before a oneOf variant's ``{{ "// default: " ... }}``, after trim_blocks took the line break
DEFAULT_GAP = " " * 20


class _Undefined:
    """Jinja's Undefined: falsy, printed as nothing, an error wherever a value is needed."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "Undefined"


UNDEFINED = _Undefined()
#: what ``spec['items']`` gives on a mapping without that key: Jinja falls back to the attribute, the
#: bound ``dict.items`` method (truthy, and undefined in every attribute)
_ITEMS_METHOD = object()


def _get(value: JSON, key: str) -> JSON:
    """``value.key`` (or ``value['key']``) as Jinja reads it from JSON data: the key of a mapping, else undefined."""
    if isinstance(value, Mapping) and key in value:
        return value[key]
    return UNDEFINED


def _attr(value: JSON, key: str, where: str) -> JSON:
    """``value.key`` where ``value`` may be undefined itself: Jinja raises then."""
    if value is UNDEFINED:
        raise InvalidMessages(f"{where}: {key!r} of an undefined value")
    return _get(value, key)


def _cat(*parts: JSON, where: str, index: int | None = None) -> str:
    """Jinja's ``a + b + ...`` on text: every operand must be a string (undefined or other types raise)."""
    texts = []
    for part in parts:
        if not isinstance(part, str):
            what = "a missing value" if part is UNDEFINED else f"a {type(part).__name__}"
            raise InvalidMessages(f"{where}: expected a string, got {what}", index=index, field=where)
        texts.append(part)
    return "".join(texts)


def _json(value: JSON, where: str, index: int | None = None) -> str:
    """``value | tojson``; undefined is not JSON."""
    if value is UNDEFINED:
        raise InvalidMessages(f"{where}: a missing value is not JSON", index=index, field=where)
    try:
        return tojson(value)
    except (TypeError, ValueError) as exc:
        raise InvalidMessages(f"{where}: {exc}", index=index, field=where) from None


def _contains(needle: str, container: JSON, where: str, index: int | None = None) -> bool:
    """Jinja's ``needle in container``: a substring of text, an item of a list, a key of a mapping."""
    if container is UNDEFINED:
        return False
    if isinstance(container, (str, list, tuple, Mapping)):
        return needle in container
    raise InvalidMessages(f"{where}: 'in' on a {type(container).__name__}", index=index, field=where)


def _join(value: JSON, sep: str, where: str) -> str:
    """Jinja's ``value | join(sep)``: ``str()`` of each item (a mapping's keys, a string's characters)."""
    if isinstance(value, (str, list, tuple, Mapping)):
        return sep.join(jstr(v) for v in value)
    raise InvalidMessages(f"{where}: cannot join a {type(value).__name__}", field=where)


def ts_type(spec: JSON) -> str:
    """The official ``render_typescript_type`` macro: a JSON schema as a TypeScript-like type."""
    kind = _get(spec, "type")
    if kind == "array":
        items = spec.get("items", _ITEMS_METHOD) if isinstance(spec, Mapping) else UNDEFINED  # a mapping: its type is
        if items:
            item_kind = _get(items, "type")
            if item_kind == "string":
                out = "string[]"
            elif item_kind in ("number", "integer") and isinstance(item_kind, str):
                out = "number[]"
            elif item_kind == "boolean":
                out = "boolean[]"
            else:
                inner = ts_type(items)
                out = "any[]" if inner == "object | object" or len(inner) > 50 else inner + "[]"
        else:
            out = "any[]"
        return out + " | null" if _get(spec, "nullable") else out
    if isinstance(kind, list) and kind:
        return _join(kind, " | ", "type") if len(kind) > 1 else jstr(kind[0])
    variants = _get(spec, "oneOf")
    if variants:
        # the official `has_object_variants` is set inside the loop, so (Jinja scoping) it never reaches the
        # test after it: every variant is rendered, object variants too
        if not isinstance(variants, (str, list, tuple, Mapping)):
            raise InvalidMessages(f"oneOf: cannot iterate a {type(variants).__name__}", field="tools")
        items_ = list(variants)
        out = ""
        for k, variant in enumerate(items_):
            out += ts_type(variant)
            description = _get(variant, "description")
            if description:
                out += _cat("// ", description, where="tools")
            if isinstance(variant, Mapping) and "default" in variant:
                out += DEFAULT_GAP + "// default: " + _json(variant["default"], "tools")
            if k < len(items_) - 1:
                out += " | \n"
        return out
    if kind == "string":
        enum = _get(spec, "enum")
        if enum:
            return '"' + _join(enum, '" | "', "enum") + '"'
        return "string | null" if _get(spec, "nullable") else "string"
    if kind in ("number", "integer") and isinstance(kind, str):
        return "number"
    if kind == "boolean":
        return "boolean"
    if kind == "object":
        properties = _get(spec, "properties")
        if not properties:
            return "object"
        if not isinstance(properties, Mapping):
            raise InvalidMessages("tools: properties must be an object", field="tools")
        required = _get(spec, "required") or []
        parts = []
        for name, prop in properties.items():
            optional = "" if _contains(name, required, "required") else "?"
            parts.append(f"{name}{optional}: {NESTED_GAP}{ts_type(prop)}")
        return "{\n" + ", ".join(parts) + "}"
    return "any"


def functions_namespace(tools: Sequence[JSON]) -> str:
    """The official ``render_tool_namespace("functions", tools)``."""
    out = ["## functions\n\nnamespace functions {\n\n"]
    for tool in tools:
        fn = _get(tool, "function")
        out.append(_cat("// ", _attr(fn, "description", "tools"), "\n", where="tools"))
        out.append(_cat("type ", _attr(fn, "name", "tools"), " = ", where="tools"))
        parameters = _get(fn, "parameters")
        properties = _get(parameters, "properties") if parameters else UNDEFINED
        if not (parameters and properties):
            out.append("() => any;\n\n")
            continue
        if not isinstance(properties, Mapping):
            raise InvalidMessages("tools: parameters.properties must be an object", field="tools")
        required = _get(parameters, "required") or []
        out.append("(_: {\n")
        for name, spec in properties.items():
            description = _get(spec, "description")
            if description:
                out.append(_cat("// ", description, "\n", where="tools"))
            out.append(name if isinstance(name, str) else jstr(name))
            if not _contains(name, required, "required"):
                out.append("?")
            out.append(": " + ts_type(spec))
            if isinstance(spec, Mapping) and "default" in spec:
                if _get(spec, "enum"):
                    out.append(_cat(", // default: ", spec["default"], where="tools"))
                elif _get(spec, "oneOf"):
                    out.append(_cat("// default: ", spec["default"], where="tools"))
                else:
                    out.append(", // default: " + _json(spec["default"], "tools"))
            out.append(",\n")
        out.append("}) => any;\n\n")
    out.append("} // namespace functions")
    return "".join(out)


def _iterate(value: JSON, where: str) -> list[JSON]:
    """What ``{% for x in value %}`` visits (a mapping's keys, a string's characters)."""
    if isinstance(value, (str, list, tuple, Mapping)):
        return list(value)
    raise InvalidMessages(f"{where}: cannot iterate a {type(value).__name__}", field=where)
