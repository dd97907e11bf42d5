"""Mistral's v7 tokenizer templates: ``[SYSTEM_PROMPT]...[/SYSTEM_PROMPT]`` before the turns (Mistral Large 2411,
Mistral Small 3, 3.1 and 3.2); 3.2 renders the v11 calls ``[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}``.

The answers, the ``lead`` and the ``</s>`` separator are as in the family's older templates (:mod:`.mistral`).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..errors import InvalidMessages, TemplateRuleError
from ..registry import template
from .chat import Chat
from .mistral import _call_id, _MistralBase, _ToolsOnLastUser
from .render_utils import jstr, tojson


@template("mistral-large-2411", "Mistral-Large-Instruct-2411", "mistral-large")
class MistralLarge2411(_MistralBase):
    """Mistral-Large-Instruct-2411: ``[SYSTEM_PROMPT] {s}[/SYSTEM_PROMPT]`` where a system message is,
    ``[INST] {q}[/INST] {a}</s>``; no alternation rule, no tools in the template."""

    official = "mistralai__Mistral-Large-Instruct-2411"
    prefix_stable = True
    tool_format = "mistral"  # the model calls tools as [TOOL_CALLS] [...] (mistral_common), its template renders none
    hyperparameter_source = "no sampling values known for this model (model card): LMDeploy defaults; context " \
                            "128K (model card)"

    session_len: int = 131072
    system: str = "[SYSTEM_PROMPT] "
    eosys: str = "[/SYSTEM_PROMPT]"
    user: str = "[INST] "
    eoh: str = "[/INST]"

    def piece(self, chat: Chat, i: int) -> str:
        role = chat.role(i)
        if role == "user":
            return f"{self.user}{chat.text(i)}{self.eoh}"
        if role == "system":
            return f"{self.system}{chat.text(i)}{self.eosys}"
        if role == "assistant":
            return f"{self.lead}{chat.text(i)}{self.separator}"
        raise TemplateRuleError("role-unsupported", V7_ROLES, index=i, field="role")


V7_ROLES = "Only user, system and assistant roles are supported!"
SMALL3_SYSTEM = (
    "You are Mistral Small 3, a Large Language Model (LLM) created by Mistral AI, a French startup headquartered "
    "in Paris.\nYour knowledge base was last updated on 2023-10-01. The current date is {today}.\n\n"
)
SMALL3_CLARIFY = (
    "If the user's question is not clear, ambiguous, or does not provide enough context for you to accurately "
    "answer the question, you do not try to answer it right away and you rather ask the user to clarify their "
    'request (e.g. "What are some good restaurants around me?" => "Where are you?" or "When is the next flight to '
    'Tokyo" => "Where do you travel from?")'
)


# Any here: a message as the template reads it: any value Jinja may read
def _first_text(message: Mapping[str, Any], i: int) -> str:
    """``content`` when it is a string, else ``content[0]['text']`` (Small 3.1's system and assistant turns)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    part = content[0] if isinstance(content, list) and content else None
    value = part.get("text") if isinstance(part, Mapping) else None
    if not isinstance(value, str):
        raise InvalidMessages("expected a string or a list whose first part has a text", index=i, field="content")
    return value


def _blocks(message: Mapping[str, Any], i: int, where: str) -> str:
    """A string content, or its blocks: text as is, ``[IMG]`` for an image; a missing content is empty."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if content is None:
        return ""  # an undefined value iterates as nothing upstream
    if not isinstance(content, (list, Mapping)):
        raise InvalidMessages(f"expected a string or a list of blocks, got {type(content).__name__}",
                              index=i, field="content")
    out = []
    for block in content:  # a mapping iterates over its keys, which are no blocks
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            out.append(jstr(block["text"]) if "text" in block else "")
        elif kind in ("image", "image_url"):
            out.append("[IMG]")
        else:
            message_text = f"Only text and image blocks are supported in {where} content!"
            raise TemplateRuleError("content-block", message_text, index=i, field="content")
    return "".join(out)


@template("mistral-small-3", "Mistral-Small-24B-Instruct-2501", "mistral-small-2501", "mistral-small-24b-2501")
class MistralSmall3(_MistralBase):
    """Mistral-Small-24B-Instruct-2501 (tokenizer v7): ``<s>[SYSTEM_PROMPT]{s}[/SYSTEM_PROMPT][INST]{q}[/INST]{a}</s>``.

    The first system message, else a default one that names the session's date
    (upstream ``strftime_now("%Y-%m-%d")``; lmchat uses the session's frozen date
    so the prefix never changes at midnight), always comes first; a later system
    message renders where it is. No alternation rule; contents must be strings.
    """

    official = "mistralai__Mistral-Small-24B-Instruct-2501"
    prefix_stable = True
    tool_format = "mistral"  # the model calls tools as [TOOL_CALLS][...] (mistral_common v7); the template has none
    hyperparameter_source = (
        "model card: 'We recommend a relatively low temperature, such as temperature=0.15'; top_p/top_k: LMDeploy "
        "defaults; context 32K (model card)"
    )
    #: the default system prompt, ``{today}`` the date (``%Y-%m-%d``)
    default_system_prompt: ClassVar[str] = SMALL3_SYSTEM + (
        "When you're not sure about some information, you say that you don't have the information and don't make "
        "up anything.\n"
    ) + SMALL3_CLARIFY
    roles_error: ClassVar[str] = V7_ROLES

    temperature: float = 0.15
    system: str = "[SYSTEM_PROMPT]"
    eosys: str = "[/SYSTEM_PROMPT]"
    user: str = "[INST]"
    eoh: str = "[/INST]"
    lead: str = ""  # the answer follows [/INST] directly

    def header(self, chat: Chat) -> str:
        if chat.role(0) == "system":
            system = self._system_text(chat, 0)
        else:
            system = self.default_system_prompt.format(today=chat.today().strftime("%Y-%m-%d"))
        return f"{self.bos}{self.system}{system}{self.eosys}"

    def piece(self, chat: Chat, i: int) -> str:
        if i < self.loop_start(chat):
            return ""  # rendered by the header
        role = chat.role(i)
        if role == "user":
            return self._user(chat, i)
        if role == "system":
            return f"{self.system}{self._system_text(chat, i)}{self.eosys}"
        if role == "assistant":
            return self._assistant(chat, i)
        return self._other(chat, i)

    def _system_text(self, chat: Chat, i: int) -> str:
        return chat.text(i)

    def _user(self, chat: Chat, i: int) -> str:
        return f"{self.user}{chat.text(i)}{self.eoh}"

    def _assistant(self, chat: Chat, i: int) -> str:
        return f"{chat.text(i)}{self.separator}"

    def _other(self, chat: Chat, i: int) -> str:
        raise TemplateRuleError("role-unsupported", self.roles_error, index=i, field="role")


@template("mistral-small-3.1", "Mistral-Small-3.1-24B-Instruct-2503", "mistral-small-2503",
          "mistral-small-3.1-24b-2503")
class MistralSmall31(MistralSmall3):
    """Mistral-Small-3.1-24B-Instruct-2503: Small 3's format with content blocks (``[IMG]`` for an image).

    A system or assistant message given as blocks renders its first block's text only.
    """

    official = "mistralai__Mistral-Small-3.1-24B-Instruct-2503"
    hyperparameter_source = (
        "model card: 'We recommend a relatively low temperature, such as temperature=0.15'; top_p/top_k: LMDeploy "
        "defaults; context 128K (model card)"
    )

    session_len: int = 131072

    def _system_text(self, chat: Chat, i: int) -> str:
        return _first_text(chat.messages[i], i)

    def _user(self, chat: Chat, i: int) -> str:
        return f"{self.user}{_blocks(chat.messages[i], i, 'message')}{self.eoh}"

    def _assistant(self, chat: Chat, i: int) -> str:
        return f"{_first_text(chat.messages[i], i)}{self.separator}"


@template("mistral-small-3.2", "Mistral-Small-3.2-24B-Instruct-2506", "mistral-small-2506",
          "mistral-small-3.2-24b-2506")
class MistralSmall32(_ToolsOnLastUser, MistralSmall31):
    """Mistral-Small-3.2-24B-Instruct-2506: 3.1's format with tools and v11 tool calls.

    ``[AVAILABLE_TOOLS]{tools as JSON}[/AVAILABLE_TOOLS]`` goes before every user
    message equal to the last one; calls render as
    ``[TOOL_CALLS]{name}[CALL_ID]{id}[ARGS]{arguments as JSON}`` per call, then
    ``</s>``, results as ``[TOOL_RESULTS]{id}[TOOL_CONTENT]{content}[/TOOL_RESULTS]``
    (ids of 9 characters). Roles alternate, ``tool`` messages and calls aside.
    """

    official = "mistralai__Mistral-Small-3.2-24B-Instruct-2506"
    supports_tools = True
    tool_format = "mistral_v11"
    default_system_prompt = SMALL3_SYSTEM + (
        "When you're not sure about some information or when the user's request requires up-to-date or specific "
        "data, you must use the available tools to fetch the information. Do not hesitate to use tools whenever "
        "they can provide a more accurate or complete response. If no relevant tools are available, then clearly "
        "state that you don't have the information and avoid making up anything.\n\n"
    ) + SMALL3_CLARIFY + (
        ".\nYou are always very attentive to dates, and when asked about information at specific dates, you "
        "discard information that is at another date.\nYou follow these instructions in all languages, and always "
        "respond to the user in the language they use or request.\nNext sections describe the capabilities that "
        "you have.\n\n# WEB BROWSING INSTRUCTIONS\n\nYou cannot perform any web search or access internet to open "
        "URLs, links etc. If it seems like the user is expecting you to do so, you clarify the situation and ask "
        "the user to copy paste the text directly in the chat.\n\n# MULTI-MODAL INSTRUCTIONS\n\nYou have the "
        "ability to read images, but you cannot generate images. You also cannot transcribe audio files or "
        "videos.\nYou cannot read nor transcribe audio files or videos.\n\n# TOOL CALLING INSTRUCTIONS\n\nYou may "
        "have access to tools that you can use to fetch information or perform actions. You must use these tools "
        "in the following situations:\n\n1. When the request requires up-to-date information.\n2. When the "
        "request requires specific data that you do not have in your knowledge base.\n3. When the request "
        "involves actions that you cannot perform without tools.\n\nAlways prioritize using tools to provide the "
        "most accurate and helpful response. If tools are not available, inform the user that you cannot perform "
        "the requested action at the moment."
    )
    roles_error = "Only system, user, assistant, and tool roles are supported!"
    skipped = staticmethod(lambda message: message["role"] == "tool" or bool(message.get("tool_calls")))

    def piece(self, chat: Chat, i: int) -> str:
        first = self.loop_start(chat)
        if i >= first:
            self._check_alternation(chat, i, first)
        return super().piece(chat, i)

    def _user(self, chat: Chat, i: int) -> str:
        tools = f"[AVAILABLE_TOOLS]{tojson(chat.tools)}[/AVAILABLE_TOOLS]" if self._lists_tools(chat, i) else ""
        return tools + super()._user(chat, i)

    def _assistant(self, chat: Chat, i: int) -> str:
        message = chat.messages[i]
        calls = message.get("tool_calls")
        if not calls:
            return f"{_blocks(message, i, 'assistant')}{self.separator}"
        if not isinstance(calls, list):
            raise InvalidMessages("expected a list of tool calls", index=i, field="tool_calls")
        out = []
        for call in calls:
            function = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(function, Mapping) or not isinstance(function.get("name"), str) \
                    or "arguments" not in function:
                raise InvalidMessages("every tool call needs a function name and arguments", index=i,
                                      field="tool_calls")
            call_id = _call_id(call.get("id"), i, "tool_calls")
            out.append(f"[TOOL_CALLS]{function['name']}[CALL_ID]{call_id}[ARGS]{tojson(function['arguments'])}")
        return "".join(out) + self.separator

    def _other(self, chat: Chat, i: int) -> str:
        message = chat.messages[i]
        if message["role"] not in ("tool", "tool_results"):
            return super()._other(chat, i)
        content = message.get("content", "")  # a missing content prints as nothing
        if isinstance(content, Mapping) and "content" in content:
            content = content["content"]
        call_id = _call_id(message.get("tool_call_id"), i, "tool_call_id")
        return f"[TOOL_RESULTS]{call_id}[TOOL_CONTENT]{jstr(content)}[/TOOL_RESULTS]"
