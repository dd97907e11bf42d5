"""The sandboxed Jinja environment of transformers 5.x ``apply_chat_template``, re-implemented.

An :class:`~jinja2.sandbox.ImmutableSandboxedEnvironment` with ``trim_blocks``,
``lstrip_blocks``, loop controls and the ``{% generation %}`` tag; transformers'
``tojson`` filter and its globals ``raise_exception``, ``strftime_now`` and the
hardened ``dict`` and ``namespace``. Chat templates arrive with model downloads:
they are untrusted code, and rendering one outside a sandbox is how
CVE-2024-34359 (llama-cpp-python) executed arbitrary code. The sandbox refuses
attributes such as ``__class__`` and the immutable variant refuses mutating
the messages.
"""
from __future__ import annotations

import contextvars
import functools
import json
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import InvalidMessages, LmchatError, TemplateConfigError, TemplateRuleError
from ..templates.chat import Chat


class TemplateRenderError(InvalidMessages):
    """The Jinja template failed on this conversation (undefined value, type error, unsafe access)."""


# ---------------------------------------------------------------------- environment
class GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` marks assistant text for training; it renders its body."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_passthrough"), [], [], body).set_lineno(lineno)

    def _passthrough(self, caller: Callable[[], str]) -> str:
        body = caller()
        # while spans are asked for, bracket the body with markers that render_generation_spans removes
        return f"{GEN_OPEN}{body}{GEN_CLOSE}" if _TRACK_GENERATION.get() else body


GEN_OPEN, GEN_CLOSE = "\ue010", "\ue011"
_TRACK_GENERATION: contextvars.ContextVar[bool] = contextvars.ContextVar("lmchat_track_generation", default=False)


class _SafeDict:
    """``dict`` for templates: callable, but the real type (and its attributes) stays out of reach."""

    # Any: the dict builtin's own arguments and result, whatever a template passes it (jinja2 values are untyped)
    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _SafeNamespace(jinja2.utils.Namespace):
    """``namespace`` refusing underscore names, which could reach internals (transformers 5.x hardening)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # jinja2's Namespace signature: self travels in args
        self, rest = args[0], args[1:]
        for key in dict(*rest, **kwargs):
            _SafeNamespace._check(key)
        jinja2.utils.Namespace.__init__(self, dict(*rest, **kwargs))

    def __setitem__(self, name: str, value: object) -> None:
        _SafeNamespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"namespace attribute names may not start with an underscore: {name!r}")


def _raise_exception(message: object) -> NoReturn:
    raise TemplateRuleError("template-raise", str(message))


def _tojson(x: object, ensure_ascii: bool = False, indent: int | str | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@functools.cache
def environment() -> ImmutableSandboxedEnvironment:
    """The one shared environment; ``strftime_now`` is passed per rendering (it reads the session's date)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["dict"] = _SafeDict()
    env.globals["namespace"] = _SafeNamespace
    return env


@functools.lru_cache(maxsize=256)
def compile_template(source: str) -> jinja2.Template:
    """Compile once per source string; a syntax error is a configuration error."""
    try:
        return environment().from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateConfigError(f"line {exc.lineno}: {exc.message}", source="chat template") from None


def render_source(source: str, chat: Chat, tokens: Mapping[str, str]) -> str:
    """``apply_chat_template(tokenize=False)`` of one template source."""
    compiled = compile_template(source)
    kwargs = dict(chat.kwargs)
    documents = kwargs.pop("documents", None)
    today = chat.today()
    variables = {
        "strftime_now": lambda fmt: today.strftime(fmt),  # a global in transformers; a variable here, same lookup
        **tokens,
        **kwargs,  # extra kwargs override special tokens, as in transformers
        "messages": chat.messages,
        "tools": chat.tools,
        "documents": documents,
        "add_generation_prompt": chat.add_generation_prompt,
    }
    try:
        return compiled.render(variables)
    except LmchatError:
        raise
    except Exception as exc:  # whatever the template's code raises is a bad conversation for it
        raise TemplateRenderError(f"chat template error: {type(exc).__name__}: {exc}") from exc


def render_generation_spans(source: str, chat: Chat, tokens: Mapping[str, str]) -> tuple[str, list[tuple[int, int]]]:
    """The rendering and the character spans of its ``{% generation %}`` blocks (transformers' assistant mask)."""
    token = _TRACK_GENERATION.set(True)
    try:
        marked = render_source(source, chat, tokens)
    finally:
        _TRACK_GENERATION.reset(token)
    text, spans, start = [], [], None
    length = 0
    for char in marked:
        if char == GEN_OPEN:
            start = length
        elif char == GEN_CLOSE and start is not None:
            spans.append((start, length))
            start = None
        else:
            text.append(char)
            length += 1
    return "".join(text), spans
