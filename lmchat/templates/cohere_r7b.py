"""Cohere's Command R7B (12-2024): Command-R's turn tokens around a reasoning and tool-use format of its own.

Rendered from code, byte-exact with ``CohereForAI__c4ai-command-r7b-12-2024-tool_use``, the only R7B text in the
corpus, rendered with and without tools.
"""
from __future__ import annotations

import json
from typing import Any

from ..errors import InvalidMessages, TemplateConfigError
from ..jsontypes import JSON
from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .cohere import CHATBOT, END, SYSTEM, USER
from .cohere_texts import (
    R7B_AVAILABLE_TOOLS,
    R7B_DEFAULT_PREAMBLE,
    R7B_DEVELOPER,
    R7B_DOCUMENT_TOOL,
    R7B_GROUNDING,
    R7B_SAFETY,
    R7B_TOOL_USE,
)
from .cohere_tools import MISSING, attr, printed

START_THINKING, END_THINKING = "<|START_THINKING|>", "<|END_THINKING|>"
START_ACTION, END_ACTION = "<|START_ACTION|>", "<|END_ACTION|>"
START_RESPONSE, END_RESPONSE = "<|START_RESPONSE|>", "<|END_RESPONSE|>"
START_RESULT, END_RESULT = "<|START_TOOL_RESULT|>", "<|END_TOOL_RESULT|>"
DOCUMENTS_PLAN = "I will look through the document to address the users needs."


def _role(chat: Chat, i: int) -> str:
    return str(chat.role(i)).lower()  # the official template compares ``role|lower``


# Any here: a message, its calls and documents as the template reads them: any value Jinja may read
def _calls(m: dict[str, Any], i: int) -> list[Any]:
    """A message's ``tool_calls`` as the template's ``for`` walks them (only when they are truthy)."""
    calls = m.get("tool_calls")
    if not calls:
        return []
    if isinstance(calls, (list, dict, str)):
        return list(calls)
    raise InvalidMessages("tool_calls must be a list of calls", index=i, field="tool_calls")


def _json(value: JSON, i: int, field: str) -> str:
    if value is MISSING:
        raise InvalidMessages("missing: the official template prints it as JSON", index=i, field=field)
    return json.dumps(value, ensure_ascii=False)


def _id_number(chat: Chat, call_id: JSON, limit: int | None = None) -> str:
    """The official ``tool_call_id_to_int``: the position, among all calls of the conversation, of the first
    call with this id ('' when none has it). Ids the model wrote are replaced by these numbers."""
    counter = 0
    for m in chat.messages[:limit]:
        for call in _calls(m, 0):
            if attr(call, "id") == call_id:
                return str(counter)
            counter += 1
    return ""


def _documents(chat: Chat) -> list[Any]:
    """The ``documents`` template keyword, as the official template walks it (none when it is falsy)."""
    documents = chat.kwargs.get("documents")
    if not documents:
        return []
    if isinstance(documents, (list, dict, str)):
        return list(documents)
    raise TemplateConfigError("documents must be a list", field="documents")


def _first_user(chat: Chat) -> int | None:
    return next((j for j in range(len(chat.messages)) if _role(chat, j) == "user"), None)


def _tool_block_start(chat: Chat, i: int) -> bool:
    """Whether tool message ``i`` opens a result block: its id is not among those the earlier blocks took in
    (a block takes the ids of the tool messages that follow its first, not the first's own)."""
    seen: list[Any] = []
    for j in range(i):
        if _role(chat, j) == "tool" and attr(chat.messages[j], "tool_call_id") not in seen:
            k = j + 1
            while k < len(chat.messages) and _role(chat, k) == "tool":
                seen.append(attr(chat.messages[k], "tool_call_id"))
                k += 1
    return attr(chat.messages[i], "tool_call_id") not in seen


@template("command-r7b", "c4ai-command-r7b-12-2024", "command-r7b-12-2024", "c4ai-command-r7b", "command_r7b")
class CommandR7B(BaseTemplate):
    """Command R7B: one system turn (Cohere's safety preamble, with tools the tool-use instructions and the tools
    as JSON, the default preamble, then a leading system message as the developer preamble), then the turns.

    The model answers ``<|START_RESPONSE|>{text}<|END_RESPONSE|>`` (``lead`` and ``eoa`` hold the markers, so
    a plain answer's history extends the prompt), or, to call tools,
    ``<|START_THINKING|>{plan}<|END_THINKING|><|START_ACTION|>[{"tool_call_id": "0", "tool_name": ...,
    "parameters": {...}}]<|END_ACTION|>``: the history renders the plan from the message's ``tool_plan`` (a
    committed answer keeps it there) and numbers the calls across the conversation, whatever their ids. Results
    are grouped per run of tool messages, each as ``{"tool_call_id": "N", "results": {"0": content}, ...}``.
    Reasoning before a plain response is not rendered back (a reset, with the reason). Roles are read in any
    case (``chatbot`` is the assistant); the generation prompt is always rendered, as the official template
    does. ``enable_citations`` adds the grounding instructions. ``documents`` (a template keyword, with
    ``tools`` given: the official template fails without) add Cohere's document tool to the list and, after the
    first user message, a call of it answered by the documents as results (the calls after it are numbered from
    1, though their results are not: the official template's own inconsistency).
    Sampling: the model card's generation example (temperature 0.3); 128K context.
    """

    official = "CohereForAI__c4ai-command-r7b-12-2024-tool_use"
    hf_special_tokens = {"bos_token": "<BOS_TOKEN>"}
    hyperparameter_source = (
        "c4ai-command-r7b-12-2024 model card as remembered here, not checked (its generation example samples at "
        "temperature 0.3; 128K context); top_p not stated (LMDeploy default)"
    )
    prefix_stable = True
    supports_tools = True
    tool_format = "command_r7b"
    reasoning = True

    session_len: int = 131072
    temperature: float = 0.3
    bos: str = "<BOS_TOKEN>"
    system: str = SYSTEM
    user: str = USER
    assistant: str = CHATBOT
    lead: str = START_RESPONSE
    eoa: str = END_RESPONSE + END
    stop_words: tuple[str, ...] | None = stops(END)

    @staticmethod
    def developer(chat: Chat) -> Any:
        """The leading system message's content, the developer preamble (when truthy)."""
        return attr(chat.messages[0], "content") if chat.messages and _role(chat, 0) == "system" else MISSING

    def header(self, chat: Chat) -> str:
        documents = _documents(chat)
        if documents and chat.tools is None:
            raise TemplateConfigError("documents need tools ([] for none): the official template lists them "
                                      "beside the tools", field="documents")
        out = [self.bos, self.system, R7B_SAFETY]
        if chat.tools or documents:
            out.append(R7B_TOOL_USE)
            if chat.kwargs.get("enable_citations"):
                out.append(R7B_GROUNDING)
            declared = [R7B_DOCUMENT_TOOL] if documents else []
            declared += [self.declared(t) for t in chat.tools or ()]
            out.append(R7B_AVAILABLE_TOOLS + "```json\n[\n" + ",\n".join(declared) + "\n]\n```\n\n")
        out.append(R7B_DEFAULT_PREAMBLE)
        developer = self.developer(chat)
        if developer:
            out.append(R7B_DEVELOPER + printed(developer))
        return "".join(out) + END

    @staticmethod
    def declared(tool: JSON) -> str:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or "parameters" not in fn:
            raise InvalidMessages("each tool needs a function with parameters", field="tools")
        parameters = json.dumps(fn["parameters"], ensure_ascii=False)
        return (f'    {{"name": "{printed(attr(fn, "name"))}", "description": "{printed(attr(fn, "description"))}", '
                f'"parameters": {parameters}, "responses": null}}')

    def piece(self, chat: Chat, i: int) -> str:
        m, role = chat.messages[i], _role(chat, i)
        content = printed(attr(m, "content"))
        if role == "system":
            return "" if i == 0 and self.developer(chat) else f"{self.system}{content}{END}"
        if role == "user":
            documents = _documents(chat) if i == _first_user(chat) else []
            return f"{self.user}{content}{END}" + (self.document_turn(documents) if documents else "")
        if role in ("assistant", "chatbot"):
            if not m.get("tool_calls"):
                return f"{self.assistant}{START_RESPONSE}{content}{self.eoa}"
            return f"{self.assistant}{self.action(chat, i)}{END}"
        if role == "tool" and _tool_block_start(chat, i):
            block = [self.result(chat, i)]
            k = i + 1
            while k < len(chat.messages) and _role(chat, k) == "tool":
                block.append(self.result(chat, k))
                k += 1
            return f"{self.system}{START_RESULT}[\n" + ",\n".join(block) + f"\n]{END_RESULT}{END}"
        return ""

    def document_turn(self, documents: list[JSON]) -> str:
        """The official ``document_turn``: a call of the document tool, and the documents as its results."""
        results = ",\n            ".join(f'"{k}": {json.dumps(d, ensure_ascii=False)}' for k, d in enumerate(documents))
        call = '    {"tool_call_id": "0", "tool_name": "direct-injected-document", "parameters": {}}'
        return (f"{self.assistant}{START_THINKING}{DOCUMENTS_PLAN}{END_THINKING}{START_ACTION}[\n{call}\n]"
                f"{END_ACTION}{END}{self.system}{START_RESULT}[\n    {{\n        \"tool_call_id\": \"0\",\n"
                f"        \"results\": {{\n            {results}\n        }},\n        \"is_error\": null\n    }}\n]"
                f"{END_RESULT}{END}")

    @staticmethod
    def action(chat: Chat, i: int) -> str:
        """The plan and calls of an answer; calls are numbered on from the calls of the answers before it (and
        the document call, when there are documents)."""
        first = sum(len(_calls(chat.messages[j], j)) for j in range(i) if _role(chat, j) in ("assistant", "chatbot"))
        user = _first_user(chat)
        first += 1 if _documents(chat) and user is not None and user < i else 0
        rendered = []
        for k, call in enumerate(_calls(chat.messages[i], i)):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or "arguments" not in fn:
                raise InvalidMessages("each tool call needs function.arguments", index=i, field="tool_calls")
            arguments = json.dumps(fn["arguments"], ensure_ascii=False)
            rendered.append(f'    {{"tool_call_id": "{first + k}", "tool_name": "{printed(attr(fn, "name"))}", '
                            f'"parameters": {arguments}}}')
        plan = printed(attr(chat.messages[i], "tool_plan"))
        return f"{START_THINKING}{plan}{END_THINKING}{START_ACTION}[\n" + ",\n".join(rendered) + f"\n]{END_ACTION}"

    @staticmethod
    def result(chat: Chat, i: int) -> str:
        m = chat.messages[i]
        number = _id_number(chat, attr(m, "tool_call_id"))
        content = _json(attr(m, "content"), i, "content")
        return (f'    {{\n        "tool_call_id": "{number}",\n        "results": {{\n            "0": {content}\n'
                '        },\n        "is_error": null\n    }')

    def tail(self, chat: Chat) -> str:
        return self.assistant  # the official template ends with it whether or not a generation prompt is asked for

    def rerender_from(self, chat: Chat, n_old: int) -> int:
        """A result block grows with the tool messages after it, and a result whose call comes later is numbered
        once it comes: re-render from the first tool message of the last run (or an earlier unnumbered one)."""
        start = max(0, n_old - 1)
        while start > 0 and _role(chat, start - 1) == "tool":
            start -= 1
        for j in range(start):
            if _role(chat, j) == "tool" and _id_number(chat, attr(chat.messages[j], "tool_call_id"), n_old) == "":
                return j
        return start

    def answer_fields(self, answer: str) -> dict[str, JSON]:
        """A raw answer as the message the history renders: the response's text as content, a plan before an
        action as ``tool_plan`` (the field the official template renders it from), other reasoning aside."""
        body, fields = answer, dict[str, str]()
        if body.startswith(START_THINKING) and END_THINKING in body:
            plan, body = body[len(START_THINKING):].split(END_THINKING, 1)
            fields["tool_plan" if START_ACTION in body else "reasoning_content"] = plan
        if body.startswith(START_RESPONSE):
            body = body[len(START_RESPONSE):].removesuffix(END_RESPONSE)
        return {"content": body, **fields}
