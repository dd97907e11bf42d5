"""Meta's Llama chat formats: Llama 2's ``[INST]`` turns and Llama 3.x header blocks.

Llama 2 wraps each user turn as ``<s>[INST] {content} [/INST]`` and each answer
as `` {content} </s>``; the system prompt is folded into the first user turn.
Llama 3.x writes every message as
``<|start_header_id|>{role}<|end_header_id|>\\n\\n{content}<|eot_id|>``; from 3.1
on a system block with the knowledge cutoff and the date always comes first,
and tool schemas, calls and results have their own layout. All of them strip
(``trim``) message content, so an answer with edge whitespace resets a session.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from ..errors import InvalidMessages, TemplateConfigError, TemplateRuleError
from ..jsontypes import JSON
from ..registry import template
from .affix import AffixTemplate
from .base import BaseTemplate, stops
from .chat import Chat
from .render_utils import check_alternation, jstr, tojson, trimmed

BOT, EOT, EOM = "<|begin_of_text|>", "<|eot_id|>", "<|eom_id|>"
MISSING = object()
CALL_FORMAT = (
    'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.'
    "Do not use variables.\n\n"
)
TOOLS_IN_SYSTEM = (
    "You have access to the following functions. To call a function, "
    "please respond with JSON for a function call." + CALL_FORMAT
)
TOOLS_IN_USER = (
    "Given the following functions, please respond with a JSON for a function call "
    "with its proper arguments that best answers the given prompt.\n\n" + CALL_FORMAT
)


def block(role: str) -> str:
    return f"<|start_header_id|>{role}<|end_header_id|>\n\n"


def string(value: JSON, i: int, field: str) -> str:
    """A value the official template concatenates with ``+``, which only works for strings."""
    if not isinstance(value, str):
        raise InvalidMessages(f"expected a string, got {type(value).__name__}", index=i, field=field)
    return value


def schemas(tools: Iterable[JSON]) -> str:
    try:
        return "".join(tojson(t, indent=4) + "\n\n" for t in tools)
    except TypeError as exc:
        raise TemplateConfigError(f"tools must be JSON-serialisable: {exc}", field="tools") from None


def json_of(value: JSON, i: int, field: str) -> str:
    try:
        return tojson(value)
    except (TypeError, ValueError) as exc:
        raise InvalidMessages(f"not JSON-serialisable: {exc}", index=i, field=field) from None


# Any here: a message and the tools a caller passes, as the template reads them: any value Jinja may read
def tool_result(message: dict[str, Any], i: int) -> str:
    """``content | tojson`` when Jinja deems it iterable (strings too, so they get quoted), else ``str()``."""
    if "content" not in message:
        raise InvalidMessages("missing content", index=i, field="content")
    content = message["content"]
    try:
        iter(content)
    except TypeError:
        return jstr(content)
    return json_of(content, i, "content")


@template("llama2", "llama2_chat", "llama-2", "llama2-chat", "llama-2-chat")
class Llama2(BaseTemplate):
    """Llama-2-Chat: ``<s>[INST] <<SYS>>\\n{system}\\n<</SYS>>\\n\\n{user} [/INST] {answer} </s>``.

    Roles must alternate user/assistant after an optional leading system
    message; other roles at assistant positions render nothing. There is no
    generation prompt: the answer follows `` [/INST]`` after a space. The model
    emits ``</s>`` right after its answer, but the template puts a space before
    it, so the engine cannot keep the model's own eos: ``eoa`` is empty and the
    next delta supplies `` </s>``. The space after ``[/INST]`` is the model's
    own (``lead``, SentencePiece's ``▁``): raw answers keep it in the context.
    """

    official = "meta-llama__Llama-2-7b-chat-hf"
    hyperparameter_source = "Llama-2-7b-chat-hf generation_config.json (temperature 0.6, top_p 0.9); 4K context"
    hf_special_tokens = {"bos_token": "<s>", "eos_token": "</s>"}
    prefix_stable = True

    session_len: int = 4096
    top_p: float = 0.9
    temperature: float = 0.6
    stop_words: tuple[str, ...] | None = stops("</s>")

    system: str = "<<SYS>>\n"
    eosys: str = "\n<</SYS>>\n\n"
    user: str = "<s>[INST] "
    eoh: str = " [/INST]"
    eoa: str = ""
    separator: str = " </s>"
    lead: str = " "

    def piece(self, chat: Chat, i: int) -> str:
        first = int(chat.role(0) == "system")
        if i < first:
            return ""  # folded into the first user turn
        check_alternation(chat, i, first)
        role = chat.role(i)
        if role not in ("user", "assistant"):
            return ""
        content = chat.text(i)
        if i == first == 1:
            content = f"{self.system}{chat.text(0)}{self.eosys}{content}"
        if role == "user":
            return f"{self.user}{content.strip()}{self.eoh}"
        return f" {content.strip()}{self.eoa}{self.separator}"


@template("llama3", "llama3_chat", "llama-3")
class Llama3(AffixTemplate):
    """Llama-3-Instruct: header blocks after ``<|begin_of_text|>``, any role, no default system prompt.

    The model ends its turn with ``<|eot_id|>`` (kept by the engine); nothing
    follows it. Content is trimmed; a non-string content prints as Jinja's
    ``str()`` of it, exactly as the official template does.
    """

    official = "meta-llama__Meta-Llama-3-8B-Instruct"
    hyperparameter_source = "Meta-Llama-3-8B-Instruct generation_config.json (temperature 0.6, top_p 0.9); 8K context"
    hf_special_tokens = {"bos_token": BOT, "eos_token": EOT}
    roles = None
    prefix_stable = True

    session_len: int = 8192
    top_p: float = 0.9
    temperature: float = 0.6
    stop_words: tuple[str, ...] | None = stops(EOT, "<|end_of_text|>")

    bos: str = BOT
    system: str = block("system")
    eosys: str = EOT
    user: str = block("user")
    eoh: str = EOT
    assistant: str = block("assistant")
    eoa: str = EOT

    def affixes(self, role: str) -> tuple[str, str]:
        if role in ("system", "user", "assistant"):
            return super().affixes(role)
        return block(role), EOT

    def piece(self, chat: Chat, i: int) -> str:
        message = chat.messages[i]
        prefix, suffix = self.affixes(message["role"])
        return f"{prefix}{trimmed(message)}{suffix}"


@template("llama3.1", "llama3_1", "llama-3.1", "llama3.3")
class Llama3_1(Llama3):
    """Llama-3.1/3.3-Instruct: a system block always opens the prompt.

    ``<|start_header_id|>system<|end_header_id|>\\n\\n`` + ``Environment:
    ipython\\n`` (with tools) + ``Tools: ...\\n\\n`` (``builtin_tools``) +
    ``Cutting Knowledge Date: December 2023\\nToday Date: {date_string}\\n\\n`` +
    the system message + ``<|eot_id|>``. Tool schemas go into the first
    message after the system one (rendered as a user turn, whatever its role)
    unless ``tools_in_user_message=False`` puts them into the system block.
    Template variables: ``tools_in_user_message``, ``builtin_tools``,
    ``custom_tools``, ``date_string`` (else the session date, else 26 Jul 2024).

    A call renders as ``{"name": ..., "parameters": ...}<|eot_id|>``, or, for a
    built-in tool, ``<|python_tag|>name.call(k="v")<|eom_id|>`` (any call ends
    with ``<|eom_id|>`` once ``builtin_tools`` is set); only one call per
    message. Results (roles ``tool``/``ipython``) go into an ``ipython`` block,
    JSON-encoded unless they are numbers. The model emits ``<|eot_id|>`` or,
    after a built-in call, ``<|eom_id|>``; a session keeps ``<|eot_id|>``, so an
    answer ending with ``<|eom_id|>`` resets.
    """

    official = "meta-llama__Llama-3.1-8B-Instruct"
    hyperparameter_source = "Llama-3.1-8B-Instruct generation_config.json (temperature 0.6, top_p 0.9); 128K context"
    supports_tools = True
    tool_format = "llama3_json"
    #: the template knows ``builtin_tools`` (``Tools:`` line, ``<|python_tag|>`` calls, ``<|eom_id|>``)
    builtin_tools_supported: ClassVar[bool] = True

    session_len: int = 131072
    stop_words: tuple[str, ...] | None = stops(EOT, "<|end_of_text|>", EOM)

    # ---------------------------------------------------------------- variables
    def date_string(self, chat: Chat) -> str:
        """The ``date_string`` variable, else :meth:`default_date`."""
        if "date_string" not in chat.kwargs:
            return self.default_date(chat)
        value = chat.kwargs["date_string"]
        if not isinstance(value, str):
            raise TemplateConfigError(f"expected a string, got {type(value).__name__}", field="date_string")
        return value

    def default_date(self, chat: Chat) -> str:
        """The official template's fixed default, unless the chat carries a (session) date."""
        return chat.date.strftime("%d %b %Y") if chat.date else "26 Jul 2024"

    def tools(self, chat: Chat) -> Any:  # custom_tools: what the caller passed, checked where it is used
        return chat.kwargs.get("custom_tools", chat.tools)

    def builtin_tools(self, chat: Chat) -> Any:
        return chat.kwargs.get("builtin_tools") if self.builtin_tools_supported else None

    def tools_in_user(self, chat: Chat) -> bool:
        return self.tools(chat) is not None and bool(chat.kwargs.get("tools_in_user_message", True))

    # ---------------------------------------------------------------- rendering
    def header(self, chat: Chat) -> str:
        tools, builtin = self.tools(chat), self.builtin_tools(chat)
        first = int(chat.role(0) == "system")
        if self.tools_in_user(chat) and len(chat.messages) == first:
            raise TemplateRuleError(
                "tools-need-user-message",
                "Cannot put tools in the first user message when there's no first user message!",
            )
        out = [self.bos, self.system]
        if builtin is not None or tools is not None:
            out.append("Environment: ipython\n")
        if builtin is not None:
            out.append("Tools: " + ", ".join(str(t) for t in builtin if t != "code_interpreter") + "\n\n")
        out.append(f"Cutting Knowledge Date: December 2023\nToday Date: {self.date_string(chat)}\n\n")
        if tools is not None and not self.tools_in_user(chat):
            out.append(TOOLS_IN_SYSTEM + schemas(tools))
        out.append(trimmed(chat.messages[0]) if first else "")
        out.append(self.eosys)
        return "".join(out)

    def piece(self, chat: Chat, i: int) -> str:
        message = chat.messages[i]
        first = int(chat.role(0) == "system")
        if i < first:
            return ""  # in the header's system block
        if i == first and self.tools_in_user(chat):
            return f"{self.user}{TOOLS_IN_USER}{schemas(self.tools(chat))}{trimmed(message)}{self.eoh}"
        if "tool_calls" in message:
            return self.call(chat, i)
        if message["role"] in ("tool", "ipython"):
            return f"{block('ipython')}{tool_result(message, i)}{EOT}"
        return super().piece(chat, i)

    def call(self, chat: Chat, i: int) -> str:
        """An assistant tool call; the message's content is dropped, as the official template does."""
        calls = chat.messages[i]["tool_calls"]
        try:
            if len(calls) != 1:
                raise TemplateRuleError(
                    "single-tool-call",
                    "This model only supports single tool-calls at once!",
                    index=i,
                    field="tool_calls",
                )
            function = calls[0]["function"]
            name, arguments = string(function["name"], i, "tool_calls"), function.get("arguments", MISSING)
        except (TypeError, KeyError, IndexError, AttributeError):
            raise InvalidMessages("expected one call {'function': {'name', 'arguments'}}", index=i,
                                  field="tool_calls") from None
        builtin = self.builtin_tools(chat)
        if builtin is not None and name in builtin:
            # Jinja's `items` filter yields nothing for a missing value and rejects non-mappings
            arguments = {} if arguments is MISSING else arguments
            if not isinstance(arguments, Mapping):
                raise InvalidMessages("a built-in tool call needs an arguments object", index=i, field="tool_calls")
            args = ", ".join(f'{string(k, i, "tool_calls")}="{string(v, i, "tool_calls")}"'
                             for k, v in arguments.items())
            body = f"<|python_tag|>{name}.call({args})"
        else:
            if arguments is MISSING:
                raise InvalidMessages("missing arguments", index=i, field="tool_calls")
            body = f'{{"name": "{name}", "parameters": {json_of(arguments, i, "tool_calls")}}}'
        return f"{self.assistant}{body}{EOT if builtin is None else EOM}"


@template("llama3.2", "llama3_2", "llama-3.2")
class Llama3_2(Llama3_1):
    """Llama-3.2-Instruct: the Llama 3.1 layout without built-in tools; the date is today's.

    The official template calls ``strftime_now("%d %b %Y")``; lmchat uses the
    session's frozen date so the prefix never changes at midnight.
    """

    official = "meta-llama__Llama-3.2-3B-Instruct"
    hyperparameter_source = "Llama-3.2-3B-Instruct generation_config.json (temperature 0.6, top_p 0.9); 128K context"
    builtin_tools_supported = False

    def default_date(self, chat: Chat) -> str:
        return chat.today().strftime("%d %b %Y")

