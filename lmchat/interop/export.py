"""Export a built-in template as an equivalent Hugging Face Jinja ``chat_template``.

Only *data* templates export: :class:`~lmchat.templates.affix.AffixTemplate`
subclasses whose rendering is the Affix logic (per-role affixes, a default
system prompt, the generation prompt) and XTuner templates. A template whose
rendering is code (``header``/``piece``/``tail`` overridden) is refused with a
pointer to its official template, which is the right thing to ship anyway.

Every literal is emitted as a Jinja string expression and every tag strips the
whitespace around it, so ``trim_blocks``/``lstrip_blocks`` and the dropped
trailing newline cannot change a byte.
"""
from __future__ import annotations

import json
import string
from collections.abc import Iterable

from ..errors import TemplateConfigError
from ..templates.affix import AffixTemplate
from ..templates.base import BaseTemplate
from ..templates.xtuner import XTunerTemplate

#: methods whose override makes a template's rendering code rather than data
RENDER_METHODS = ("header", "piece", "tail", "check", "render_window")
BASIC_ROLES = ("system", "user", "assistant")
ROLE_PROBE = "\x00ROLE\x00"
CONTENT = "message['content']"


def lit(text: str) -> str:
    """A Jinja string literal for ``text`` (Jinja decodes its escapes like Python's unicode-escape)."""
    return json.dumps(text, ensure_ascii=False)


def concat(*parts: str) -> str:
    """A Jinja ``~`` concatenation of expressions, empty literals left out."""
    kept = [p for p in parts if p != '""']
    return " ~ ".join(kept) or '""'


def emit(expr: str) -> list[str]:
    """An output line for a Jinja expression; nothing for an empty literal."""
    return [] if expr == '""' else [f"{{{{- {expr} -}}}}"]


def _overridden(cls: type, base: type) -> list[str]:
    return [m for m in RENDER_METHODS if getattr(cls, m) is not getattr(base, m)]


def export_problem(template: BaseTemplate) -> str | None:
    """Why ``template`` cannot be exported, or None when it can."""
    cls = type(template)
    if template.capability != "chat":
        return f"{template.name!r} is a completion template (no chat format to export)"
    base = AffixTemplate if isinstance(template, AffixTemplate) else XTunerTemplate if isinstance(
        template, XTunerTemplate) else None
    code = _overridden(cls, base) if base else ["piece"]
    if not code:
        return None
    official = f"; use the official template {cls.official!r} instead" if cls.official else ""
    return (f"export is not available for {template.name!r}: its rendering is code "
            f"({', '.join(code)} overridden), not data{official}")


def export_jinja(template: BaseTemplate) -> str:
    """A Jinja chat template rendering exactly what ``template`` renders."""
    problem = export_problem(template)
    if problem:
        raise TemplateConfigError(problem)
    if isinstance(template, XTunerTemplate):
        body = _xtuner(template)
    else:
        assert isinstance(template, AffixTemplate), "export_problem refuses the other templates"
        body = _affix(template)
    return f"{{#- exported by lmchat from the built-in template {template.name} -#}}\n" + "\n".join(body) + "\n"


def _content_check() -> list[str]:
    # the built-ins need string content; rejecting it keeps both sides' errors alike
    return [
        "{%- if message['content'] is not string -%}",
        "{{- raise_exception('messages[' ~ loop.index0 ~ ']: content must be a string') -}}",
        "{%- endif -%}",
    ]


def _role_affixes(template: AffixTemplate, role: str) -> tuple[str, str]:
    """Jinja expressions of a role's prefix and suffix; the probe role becomes ``message['role']``."""
    out = []
    for text in template.affixes(role):
        pieces = [lit(p) for p in text.split(ROLE_PROBE)]
        out.append(concat(*[x for i, p in enumerate(pieces) for x in ((p,) if i == 0 else ("message['role']", p))]))
    return out[0], out[1]


def _affix(t: AffixTemplate) -> list[str]:
    lines = []
    if t.meta_instruction is not None:
        # the default system prompt stands in for a missing system message
        lines += ["{%- if messages | length == 0 or messages[0]['role'] != 'system' -%}"]
        lines += emit(lit(t.bos + t.system + t.meta_instruction + t.eosys))
        lines += (["{%- else -%}"] + emit(lit(t.bos)) if t.bos else []) + ["{%- endif -%}"]
    else:
        lines += emit(lit(t.bos))
    roles = type(t).roles
    content = f"{CONTENT} | trim" if type(t).strip_content else CONTENT
    lines += ["{%- for message in messages -%}"]
    if roles is None:  # any role: the three basic ones, then the generic affixes
        lines += _content_check() + _role_chain(t, BASIC_ROLES, content)
        lines += ["{%- else -%}"] + _other_role(t, content) + ["{%- endif -%}"]
    else:
        lines += [f"{{%- if message['role'] in {json.dumps(list(roles))} -%}}"] + _content_check()
        lines += _role_chain(t, roles, content) + ["{%- endif -%}"]
        if type(t).other_roles != "skip":
            lines += ["{%- else -%}", _unsupported(t)]
        lines += ["{%- endif -%}"]
    lines += ["{%- endfor -%}"]
    if t.assistant:
        lines += ["{%- if add_generation_prompt -%}"] + emit(lit(t.assistant)) + ["{%- endif -%}"]
    return lines


def _unsupported(t: BaseTemplate) -> str:
    reason = lit(f" is not supported by template {t.name!r}")
    return f"{{{{- raise_exception('role ' ~ message['role'] ~ {reason}) -}}}}"


def _role_chain(t: AffixTemplate, roles: Iterable[str], content: str) -> list[str]:
    """``if role == ...`` branches, one per role, each ``prefix + content + suffix`` (left open)."""
    lines = []
    for i, role in enumerate(roles):
        prefix, suffix = _role_affixes(t, role)
        lines += [f"{{%- {'if' if i == 0 else 'elif'} message['role'] == {lit(role)} -%}}",
                  *emit(concat(prefix, f"({content})", suffix))]
    return lines


def _other_role(t: AffixTemplate, content: str) -> list[str]:
    """Any other role of a template without a role list: its generic affixes, if it has them."""
    try:
        prefix, suffix = _role_affixes(t, ROLE_PROBE)
    except KeyError:
        return [_unsupported(t)]
    return emit(concat(prefix, f"({content})", suffix))


def _format(fmt: str, field: str, **values: str) -> str:
    """A Python ``str.format`` string as a Jinja concatenation (fields are Jinja expressions)."""
    parts = []
    for literal, name, spec, conversion in string.Formatter().parse(fmt):
        parts.append(lit(literal))
        if name is None:
            continue
        if spec or conversion or name not in values:
            raise TemplateConfigError(f"cannot export the placeholder {{{name}}} (only {', '.join(values)})",
                                      field=field, source="export")
        parts.append(values[name])
    return concat(*parts)


def _xtuner(t: XTunerTemplate) -> list[str]:
    lines = emit(lit(t.bos))
    eos = "" if t.suffix_as_eos else t.eos
    lines += ["{%- set ns = namespace(round=0) -%}", "{%- for message in messages -%}"] + _content_check()
    lines += [
        "{%- if message['role'] == 'system' -%}",
        *emit(_format(t.system_format, "SYSTEM", system=CONTENT)),
        "{%- elif message['role'] == 'user' -%}",
        "{%- set ns.round = ns.round + 1 -%}",
        *emit(_format(t.instruction, "INSTRUCTION", input=CONTENT, round="ns.round")),
        "{%- elif message['role'] == 'assistant' -%}",
        *emit(concat(CONTENT, lit(t.suffix + eos + t.sep))),
        "{%- else -%}",
        _unsupported(t),
        "{%- endif -%}",
        "{%- endfor -%}",
    ]
    return lines


def exportable_names() -> list[str]:
    """Registered templates that export."""
    from ..registry import get_template, template_names

    return [n for n in template_names() if export_problem(get_template(n)) is None]
