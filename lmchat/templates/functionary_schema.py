"""Functionary v3.2's tools as its official template declares them: a TypeScript-like ``namespace functions``.

Each macro of the template (``get_param_type``, ``get_param_info``, ``get_array_typescript``,
``get_parameter_typescript``, ``generate_schema_from_functions``) is a function here, reading the data as Jinja
reads it: a parameter without a type has an empty type, a ``oneOf`` without formats an empty ``Format=``, an
example's quotes turned into double quotes. :mod:`.functionary` is the template.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import TemplateConfigError
from ..jsontypes import JSON
from .render_utils import jstr

NONE = "<|NONE|>"
_MISSING = object()
BOUNDS = (("maximum", "Maximum"), ("minimum", "Minimum"), ("maxLength", "Maximum length"),
          ("minLength", "Minimum length"))


def _cat(*parts: JSON) -> str:
    """Jinja's ``a + b + ...`` on text: every operand must be a string."""
    texts = []
    for part in parts:
        if not isinstance(part, str):
            raise TemplateConfigError(f"expected a string, got {type(part).__name__}", field="tools")
        texts.append(part)
    return "".join(texts)


def _contains(needle: JSON, container: JSON) -> bool:
    """Jinja's ``needle in container`` (a substring of text, an item of a list, a key of a mapping)."""
    if isinstance(container, str):
        return isinstance(needle, str) and needle in container
    if isinstance(container, (list, tuple, Mapping)):
        return needle in container
    raise TemplateConfigError(f"'in' on a {type(container).__name__}", field="tools")


def _iterable(value: JSON) -> bool:
    return isinstance(value, (str, list, tuple, Mapping))


def _data_type(kind: str) -> str:
    """The ``convert_data_type`` macro."""
    return "number" if kind in ("integer", "float") else kind


def _unique(values: list[JSON]) -> list[JSON]:
    """Jinja's ``unique``: the first of values equal ignoring the case of text."""
    seen, out = [], []
    for v in values:
        key = v.lower() if isinstance(v, str) else v
        if key not in seen:
            seen.append(key)
            out.append(v)
    return out


# Any here: schema values as the macros read them, indexed once 'in' (on text, a list or a mapping) finds the key,
# as Jinja's template does (a string or a list then fails as Python fails)
def param_type(param: Any) -> str:
    """The ``get_param_type`` macro: '' for a parameter with neither ``type`` nor ``oneOf``."""
    if _contains("type", param):
        raw = param["type"]
        return _data_type(" | ".join(jstr(t) for t in raw) if _iterable(raw) and not isinstance(raw, str)
                          else jstr(raw))
    if _contains("oneOf", param):
        variants = [v["type"] for v in param["oneOf"] if isinstance(v, Mapping) and "type" in v]
        return _data_type(" | ".join(jstr(t) for t in _unique(variants)))
    return ""


def _format(param: Mapping[str, Any]) -> str:
    """The ``get_format_param`` macro."""
    if "format" in param:
        return jstr(param["format"])
    if "oneOf" in param:
        variants = param["oneOf"]
        last = variants[-1] if variants else None
        # a last variant without a format is undefined, which equals nothing
        last_format = last["format"] if isinstance(last, Mapping) and "format" in last else _MISSING
        out = ""
        for item in variants:
            if _contains("format", item):
                out += jstr(item["format"]) if item["format"] == last_format else _cat(item["format"], " or ")
        return out
    return NONE


def param_info(param: Mapping[str, JSON]) -> str:
    """The ``get_param_info`` macro: the ``//`` comment line of a parameter, or ``<|NONE|>``."""
    kind = param.get("type", "any")
    fmt = _format(param)
    if not ("description" in param or "default" in param or fmt != NONE
            or any(param.get(field) for field, _ in BOUNDS)):
        return NONE
    out = "//"
    if "description" in param:
        description = param["description"]
        if not isinstance(description, str):
            raise TemplateConfigError("a parameter's description must be a string", field="tools")
        out += " " + (description if description.endswith(".") else description + ".")
    if "default" in param:
        default = jstr(param["default"])
        out += " Default=" + (f'"{default}"' if kind == "string" else default) + "."
    if fmt != NONE:
        out += " Format=" + fmt
    for field, label in BOUNDS:
        if field in param:
            out += f" {label}={jstr(param[field])}"
    return out


def _enum(options: JSON) -> str:
    """The ``get_enum_option_str`` macro."""
    if not isinstance(options, (str, list, tuple, Mapping)):  # not _iterable(options)
        raise TemplateConfigError(f"enum: cannot iterate a {type(options).__name__}", field="tools")
    values = list(options)
    out = ""
    for v in values:
        out += _cat('"', v, '"') if isinstance(v, str) else jstr(v)
        if values and v != values[-1]:
            out += " | "
    return out


def _comments(comment: str, examples: list[JSON], offset: str) -> str:
    out = "\n" + offset + comment if comment != NONE else ""
    return out + "".join("\n" + offset + "// " + jstr(e).replace("'", '"') for e in examples)


def _declared(declaration: str, comment: str, examples: list[JSON], depth: int) -> str:
    """The ``append_new_param_info`` macro."""
    offset = "    " * depth
    out = _comments(comment, examples, offset) if comment != NONE else ""
    return out + "\n" + offset + declaration


def _get(value: JSON, key: str, default: JSON) -> Any:
    if not isinstance(value, Mapping):
        raise TemplateConfigError(f"expected an object, got {type(value).__name__}", field="tools")
    return value.get(key, default)


def array_type(name: str | None, spec: JSON, depth: int) -> str:
    """The ``get_array_typescript`` macro."""
    offset = "    " * depth
    items = _get(spec, "items", {})
    if not _iterable(items):
        raise TemplateConfigError(f"items: a {type(items).__name__} has no length", field="tools")
    if len(items) == 0:
        return "\n" + offset + (name + ": []" if name else "[]")
    kind = param_type(items)
    if kind == "object":
        out = "\n" + offset + (name + ": {" if name else "{")
        out += parameters(_get(items, "properties", {}), _get(items, "required", []), depth + 1)
        return out + "\n" + offset + "}[]"
    if kind == "array":
        inner = array_type(None, items, depth + 1)
        return "\n" + inner + "[]" if not name else "\n" + offset + name + ": " + inner.strip() + "[]"
    if _contains("enum", items):
        options = _enum(items["enum"])
        return "(" + options + ")[]" if name is None else "\n" + offset + name + ": (" + options + ")[]"
    return "\n" + kind + "[]" if name is None else "\n" + offset + name + ": " + kind + "[],"


def parameters(properties: JSON, required: JSON, depth: int = 0) -> str:
    """The ``get_parameter_typescript`` macro."""
    if not isinstance(properties, Mapping):
        raise TemplateConfigError("properties must be an object", field="tools")
    offset = "    " * depth
    out = ""
    for name, param in properties.items():
        if not isinstance(param, Mapping):
            continue
        comment = param_info(param)
        examples: list[JSON] = []
        if "examples" in param:
            if not isinstance(param["examples"], list):
                raise TemplateConfigError("examples must be a list", field="tools")
            examples = [_cat("Example ", name, ":"), *param["examples"]]
        declaration = name
        if _iterable(required) and not _contains(name, required):
            declaration += "?"
        kind = param_type(param)
        if kind == "object":
            out += _comments(comment, examples, offset) + "\n" + offset + declaration + ": {"
            out += parameters(_get(param, "properties", {}), _get(param, "required", []), depth + 1)
            out += "\n" + offset + "},"
        elif kind == "array":
            items = param.get("items", {})
            if not _contains("type", items):
                out += _declared(declaration + ": [],", comment, examples, depth)
            else:
                declared = array_type(declaration, param, depth)
                out += _comments(comment, examples, offset) + (declared if declared.endswith(",") else declared + ",")
        else:
            if "enum" in param:
                kind = _enum(param["enum"])
            if param.get("nullable"):
                kind += " | null"
            out += _declared(_cat(declaration, ": ", kind, ","), comment, examples, depth)
    return out


def namespace(tools: list[JSON]) -> str:
    """The ``generate_schema_from_functions`` macro: every tool with a name, as a TypeScript type."""
    out = "// Supported function definitions that should be called when necessary.\nnamespace functions {\n\n"
    for tool in tools:
        function = _get(tool, "function", None) or tool
        name = _get(function, "name", None)
        if not name:
            continue
        params = _get(function, "parameters", {})
        out += _cat("// ", _get(function, "description", ""), "\n", "type ", name)
        properties = _get(params, "properties", None) if params else None
        if properties:
            out += " = (_: {" + parameters(properties, _get(params, "required", [])) + "\n}) => any;\n\n"
        else:
            out += " = () => any;\n\n"
    return out + "} // namespace functions"
