"""Cohere's Command-R and Command R+: ``<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{q}<|END_OF_TURN_TOKEN|>``.

Each model ships two official templates, and transformers picks one by whether ``tools`` are given (``tools is
not None``: an empty list picks the tool-use one too): the default (byte-exact with
``CohereForAI__c4ai-command-r-plus``) and the tool-use template (``…-tool_use``), a system turn of fixed
preambles and tool declarations before the conversation, and an instruction turn after it. Command R7B is in
:mod:`.cohere_r7b`.
"""
from __future__ import annotations

import json

from ..errors import InvalidMessages, TemplateRuleError
from ..jsontypes import JSON
from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .cohere_texts import R_AVAILABLE_TOOLS, R_DEFAULT_SYSTEM, R_INSTRUCTION, R_PREAMBLE
from .cohere_tools import MISSING, attr, plus_tools, v01_tools
from .render_utils import check_alternation, trimmed

START, END = "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>"
SYSTEM, USER, CHATBOT = f"{START}<|SYSTEM_TOKEN|>", f"{START}<|USER_TOKEN|>", f"{START}<|CHATBOT_TOKEN|>"
SAMPLING_SOURCE = ("model card as remembered here, not checked (its generation example samples at temperature 0.3; "
                   "128K context); top_p not stated (LMDeploy default)")


def jinja_indent(text: str, width: int, first: bool = False) -> str:
    """Jinja's ``indent`` filter (``blank=False``): every line but the first (and blank ones) indented; it splits
    lines as ``str.splitlines`` does."""
    pad = " " * width
    lines = (text + "\n").splitlines()
    out = lines.pop(0)
    if lines:
        out += "\n" + "\n".join(pad + line if line else line for line in lines)
    return pad + out if first else out


def _iterated(value: JSON, i: int, field: str) -> list[JSON]:
    """What Jinja's ``for`` walks: a list's items, a dict's keys, a string's characters."""
    if isinstance(value, (list, dict, str)):
        return list(value)
    raise InvalidMessages(f"{field} must be a list", index=i, field=field)


def _action_call(call: JSON, i: int) -> str:
    """One call of Command R+'s ``Action:`` list, indented as the official template's ``indent`` filters do."""
    fn = call["function"] if isinstance(call, dict) and "function" in call else call
    name = attr(fn, "name")
    if not isinstance(name, str):
        raise InvalidMessages("each tool call needs a string function.name", index=i, field="tool_calls")
    out = "    {\n" + f'        "tool_name": "{name}",\n' + '        "parameters": '
    arguments = attr(fn, "arguments")
    if arguments is not MISSING and not isinstance(arguments, (str, list, dict)):
        raise InvalidMessages("tool call arguments must be an object or a JSON string", index=i, field="tool_calls")
    if isinstance(arguments, (str, list, dict)) and len(arguments) > 0:  # else MISSING
        out += jinja_indent(json.dumps(arguments, ensure_ascii=False, indent=4), 8) + "\n"
    else:
        out += "{}\n"
    return out + "    }"


@template("command-r-plus", "c4ai-command-r-plus", "c4ai-command-r-plus-08-2024", "command-r-plus-08-2024",
          "command-r-plus-04-2024", "c4ai-command-r-08-2024", "command-r-08-2024", "command_r_plus")
class CommandRPlus(BaseTemplate):
    """Command R+ (and the 08-2024 Command-R, which ships the same two texts as far as known here).

    Without tools: ``<BOS_TOKEN>``, a leading system message as a system turn, then user and assistant turns
    that must alternate (other roles are skipped), each text stripped. With tools (even ``[]``): one system
    turn of Cohere's safety and system preambles, the system message (else Cohere's default task and style
    guide) and the tools as Python stubs (:mod:`.cohere_tools`); then every turn, with system and tool messages
    (results as ``<results>\\n{r}</results>`` in a system turn) and calls as ``{content}\\nAction:\\n```json
    [...]```\\n`` (no end of turn, as the official template writes it); then the instruction turn that asks for
    ``Action:``, which the history of the next turn no longer has, so a session resets after every tool-use
    turn (with the reason). A ``directly_answer`` action (the model's way to call nothing) is no call.
    """

    official = "CohereForAI__c4ai-command-r-plus"
    official_tool_use = "CohereForAI__c4ai-command-r-plus-tool_use"
    hf_special_tokens = {"bos_token": "<BOS_TOKEN>"}
    hyperparameter_source = f"c4ai-command-r-plus {SAMPLING_SOURCE}"
    prefix_stable = True
    supports_tools = True
    tool_format = "command_r"

    session_len: int = 131072
    temperature: float = 0.3
    bos: str = "<BOS_TOKEN>"
    system: str = SYSTEM
    user: str = USER
    assistant: str = CHATBOT
    eoa: str = END
    stop_words: tuple[str, ...] | None = stops(END)

    @staticmethod
    def tool_use(chat: Chat) -> bool:
        """transformers renders the ``tool_use`` template when ``tools is not None``."""
        return chat.tools is not None

    def header(self, chat: Chat) -> str:
        if not self.tool_use(chat):
            return self.bos
        system = chat.text(0) if chat.role(0) == "system" else R_DEFAULT_SYSTEM
        return f"{self.bos}{self.system}{R_PREAMBLE}{system}{R_AVAILABLE_TOOLS}{self.declare(chat.tools)}{self.eoa}"

    def declare(self, tools: JSON) -> str:
        return plus_tools(tools)

    def piece(self, chat: Chat, i: int) -> str:
        if self.tool_use(chat):
            return "" if i == 0 and chat.role(0) == "system" else self.tool_use_piece(chat, i)
        first = 1 if chat.role(0) == "system" else 0
        if i < first:
            return f"{self.system}{chat.text(0)}{self.eoa}"
        check_alternation(chat, i, first)
        role = chat.role(i)
        if role == "user":
            return f"{self.user}{chat.text(i).strip()}{self.eoa}"
        if role == "assistant":
            return f"{self.assistant}{chat.text(i).strip()}{self.eoa}"
        return ""

    def tool_use_piece(self, chat: Chat, i: int) -> str:
        m, role = chat.messages[i], chat.role(i)
        if role == "user":
            return f"{self.user}{trimmed(m)}{self.eoa}"
        if role == "system":
            return f"{self.system}{trimmed(m)}{self.eoa}"
        if role == "assistant" and "tool_calls" in m:
            calls = ",\n".join(_action_call(call, i) for call in _iterated(m["tool_calls"], i, "tool_calls"))
            return f"{self.assistant}{trimmed(m)}\nAction:\n```json\n[\n{calls}\n]```\n"
        if role == "assistant":
            return f"{self.assistant}{trimmed(m)}{self.eoa}"
        if role == "tool":
            return f"{self.system}<results>\n{trimmed(m)}</results>{self.eoa}"
        return ""

    def tail(self, chat: Chat) -> str:
        prompt = self.assistant if chat.add_generation_prompt else ""
        return f"{self.system}{R_INSTRUCTION}{self.eoa}{prompt}" if self.tool_use(chat) else prompt


@template("command-r", "c4ai-command-r-v01", "command-r-v01", "command_r")
class CommandR(CommandRPlus):
    """Command-R v01 (March 2024).

    Its default template is the same text as Command R+'s (``CohereForAI__c4ai-command-r-plus``: the v01 text is
    not in the corpus, but R+ shipped v01's template unchanged, down to its unused "You are Command-R" branch),
    so the default rendering is R+'s. Its tool-use template (``CohereForAI__c4ai-command-r-v01-tool_use``) is
    older: tools only in Cohere's format (``name``, ``description``, ``parameter_definitions``; an OpenAI tool
    is refused, as the official template fails on it), every text stripped and none may be missing, and tool
    calls and tool messages are not rendered at all.
    """

    official = "CohereForAI__c4ai-command-r-plus"
    official_tool_use = "CohereForAI__c4ai-command-r-v01-tool_use"
    hyperparameter_source = f"c4ai-command-r-v01 {SAMPLING_SOURCE}"

    def declare(self, tools: JSON) -> str:
        try:
            return v01_tools(tools)
        except TemplateRuleError as exc:
            reason = exc.reason.rsplit(" [rule:", 1)[0]
            raise TemplateRuleError(
                "tool-declaration", f"{reason}; Command-R v01's tool-use template reads tools in Cohere's format "
                "only: {'name', 'description', 'parameter_definitions': {arg: {'type', 'description', 'required'}}}",
                field="tools") from None

    def tool_use_piece(self, chat: Chat, i: int) -> str:
        role = chat.role(i)
        if role == "user":
            return f"{self.user}{chat.text(i).strip()}{self.eoa}"
        if role == "system":
            return f"{self.system}{chat.text(i).strip()}{self.eoa}"
        if role == "assistant":
            return f"{self.assistant}{chat.text(i).strip()}{self.eoa}"
        return ""  # tool results are not rendered by v01's template
