"""IBM Granite 3.x Instruct: ``<|start_of_role|>{role}<|end_of_role|>{content}<|end_of_text|>\\n``.

Granite 3.1 and 3.3 always open the conversation with a system block: the
first message when it is a system message, else a default prompt stating the
knowledge cutoff and today's date (``strftime_now``, here ``chat.today()``,
frozen per session), extended for tools, documents and controls (3.3: and
thinking). Tools follow as a block of their own, then the documents. Granite
3.0 has no default prompt: tools first, then the messages of five known roles.
The model ends its turn with ``<|end_of_text|>`` (a stop word the engine
keeps); the ``\\n`` after it comes with the next turn's delta. Granite 4.0 is
in :mod:`.granite_v4`.
"""
from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..errors import TemplateConfigError
from ..jsontypes import JSON
from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .render_utils import jstr, tojson

START, END, EOT = "<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>"

DEFAULT_SYSTEM = "Knowledge Cutoff Date: April 2024.\nToday's Date: {date}.\nYou are Granite, developed by IBM."
ROLE_TOOLS = (
    " You are a helpful AI assistant with access to the following tools. When a tool is required to answer the "
    "user's query, respond with <|tool_call|> followed by a JSON list of tools used. If a tool does not exist in the "
    "provided list of tools, notify the user that you do not have the ability to fulfill the request."
)
ROLE_DOCUMENTS = (
    "Write the response to the user's input by strictly aligning with the facts in the provided documents. If the "
    "information needed to answer the question is not available in the documents, inform the user that the question "
    "cannot be answered based on the available data."
)
ROLE_PLAIN = " You are a helpful AI assistant."
CITATIONS = (
    "\n\nIn your response, use the symbols <co> and </co> to indicate when a fact comes from a document in the search "
    "result, e.g <co>0</co> for a fact from document 0. Afterwards, list all the citations with their corresponding "
    "documents in an ordered list."
)
HALLUCINATIONS = (
    "\n\nFinally, after the response is written, include a numbered list of sentences from the response that are "
    "potentially hallucinated and not based in the documents."
)

# Granite 3.3's wording: one line, "respond only with", and its thinking, citation and hallucination texts
DEFAULT_SYSTEM_33 = "Knowledge Cutoff Date: April 2024. Today's Date: {date}. You are Granite, developed by IBM."
ROLE_TOOLS_33 = (
    " You are a helpful assistant with access to the following tools. When a tool is required to answer the user's "
    "query, respond only with <|tool_call|> followed by a JSON list of tools used. If a tool does not exist in the "
    "provided list of tools, notify the user that you do not have the ability to fulfill the request."
)
ROLE_THINKING_33 = (
    " You are a helpful AI assistant.\nRespond to every user query in a comprehensive and detailed way. You can write "
    "down your thoughts and reasoning process before responding. In the thought process, engage in a comprehensive "
    "cycle of analysis, summarization, exploration, reassessment, reflection, backtracing, and iteration to develop "
    "well-considered thinking process. In the response section, based on various attempts, explorations, and "
    "reflections from the thoughts section, systematically present the final solution that you deem correct. The "
    "response should summarize the thought process. Write your thoughts between <think></think> and write your "
    "response between <response></response> for each user query."
)
CITATIONS_33 = (
    "\nUse the symbols <|start_of_cite|> and <|end_of_cite|> to indicate when a fact comes from a document in the "
    "search result, e.g <|start_of_cite|> {document_id: 1}my fact <|end_of_cite|> for a fact from document 1. "
    "Afterwards, list all the citations with their corresponding documents in an ordered list."
)
HALLUCINATIONS_33 = (
    "\nFinally, after the response is written, include a numbered list of sentences from the response with a "
    "corresponding risk value that are hallucinated and not based in the documents."
)


def looped(value: JSON, field: str) -> Collection[JSON]:
    """A template variable the official template loops over or tests with ``in`` (documents, controls): Jinja
    fails on a value that is neither a list, an object nor a string."""
    if not isinstance(value, (list, tuple, dict, str)):
        raise TemplateConfigError(f"must be a list or an object, got {type(value).__name__}", field=field)
    return value


def document_field(document: JSON, key: str) -> str:
    """What ``{{ document[key] }}`` (or ``document[key] | string``) prints: nothing for a missing key."""
    return jstr(document[key]) if isinstance(document, dict) and key in document else ""


def document_text(document: JSON) -> str:
    """What ``{{ document['text'] }}`` prints."""
    return document_field(document, "text")


@template("granite3", "granite-3.1", "granite")
class Granite3(BaseTemplate):
    """Granite 3.1 Instruct, with its dated default system prompt.

    Template variables (``make_chat``/``messages2prompt`` keyword arguments):
    ``documents`` (a list of ``{"text": ...}``) and ``controls`` (e.g.
    ``{"citations": True}``), as in the official template. Tools are listed in
    a ``tools`` block; as in the official template, ``tool_calls`` are not
    rendered (the model writes ``<|tool_call|>[...]`` in its content) and a
    ``tool`` message is a turn of role ``tool``.
    """

    official = "ibm-granite__granite-3.1-8b-instruct"
    hyperparameter_source = "granite-3.1-8b-instruct config.json (128K context); sampling: defaults (none published)"
    hf_special_tokens = {"eos_token": EOT}
    prefix_stable = True
    supports_tools = True
    tool_format = "granite"

    session_len: int = 131072
    system: str = f"{START}system{END}"
    eosys: str = f"{EOT}\n"
    assistant: str = f"{START}assistant{END}"
    eoa: str = EOT
    separator: str = "\n"
    stop_words: tuple[str, ...] | None = stops(EOT)

    def builtin_system(self, chat: Chat) -> str:
        tools, documents = self.tools(chat), chat.kwargs.get("documents")
        controls = looped(chat.kwargs.get("controls") or (), "controls")
        text = DEFAULT_SYSTEM.format(date=chat.today().strftime("%B %d, %Y"))
        if tools and documents:
            text += f"{ROLE_TOOLS}\n\n{ROLE_DOCUMENTS}"
        elif tools:
            text += ROLE_TOOLS
        elif documents:
            text += f" {ROLE_DOCUMENTS}"
        else:
            text += ROLE_PLAIN
        if "citations" in controls and documents:
            text += CITATIONS
        if "hallucinations" in controls and documents:
            text += HALLUCINATIONS
        return text

    # Any here: the tools a caller passes, as the template reads them: any value Jinja may read
    def tools(self, chat: Chat) -> Any:
        """The tool list the template reads."""
        return chat.tools

    def tools_block(self, chat: Chat) -> str:
        tools = self.tools(chat)
        return f"{START}tools{END}{tojson(tools, indent=4)}{EOT}\n" if tools else ""

    def documents_block(self, documents: Collection[JSON]) -> str:
        texts = [f"Document {k}\n{document_text(d)}" for k, d in enumerate(documents)]
        return f"{START}documents{END}" + "\n\n".join(texts) + f"{EOT}\n"

    def header(self, chat: Chat) -> str:
        own = chat.role(0) == "system"
        out = [self.system, chat.text(0) if own else self.builtin_system(chat), self.eosys, self.tools_block(chat)]
        documents = chat.kwargs.get("documents")
        if documents:
            out.append(self.documents_block(looped(documents, "documents")))
        return "".join(out)

    def piece(self, chat: Chat, i: int) -> str:
        if i == 0 and chat.role(0) == "system":
            return ""  # rendered by the header
        return f"{START}{chat.role(i)}{END}{chat.text(i)}{EOT}\n"

    def tail(self, chat: Chat) -> str:
        # The official template prompts after the last non-system-prompt message only.
        if not chat.add_generation_prompt or (len(chat.messages) == 1 and chat.role(0) == "system"):
            return ""
        controls = chat.kwargs.get("controls")
        return f"{START}assistant{' ' + tojson(controls) if controls else ''}{END}"


@template("granite-3.3", "granite-3.3-2b-instruct", "granite-3.3-8b-instruct", "granite3.3")
class Granite33(Granite3):
    """Granite 3.3 Instruct: 3.1's layout, with its own prompts, documents and a thinking mode.

    Template variables: ``thinking`` (true: the default system prompt asks for
    ``<think>...</think><response>...</response>``; only when neither tools nor
    documents are given, as in the official template), ``documents`` (each
    ``{"doc_id": ..., "text": ...}``, one ``document`` block each), ``controls``
    and ``available_tools`` (the official name of the tool list; ``tools`` is
    its alias). The answer of a thinking turn is rendered back as the model
    wrote it, tags and all, so the history extends the prompt; the parser
    (format ``granite33``) splits the reasoning off and unwraps the response.
    """

    official = "ibm-granite__granite-3.3-2b-instruct"
    hyperparameter_source = (
        "granite-3.3-2b/8b-instruct config.json (128K context); sampling: LMDeploy defaults (none published)"
    )
    tool_format = "granite33"
    reasoning = True

    def tools(self, chat: Chat) -> Any:
        return chat.kwargs.get("available_tools") or chat.tools

    def builtin_system(self, chat: Chat) -> str:
        tools, documents = self.tools(chat), chat.kwargs.get("documents")
        controls = looped(chat.kwargs.get("controls") or (), "controls")
        text = DEFAULT_SYSTEM_33.format(date=chat.today().strftime("%B %d, %Y"))
        if tools and documents:
            text += f"{ROLE_TOOLS_33} {ROLE_DOCUMENTS}"
        elif tools:
            text += ROLE_TOOLS_33
        elif documents:
            text += f" {ROLE_DOCUMENTS}"
        elif chat.kwargs.get("thinking"):
            text += ROLE_THINKING_33
        else:
            text += ROLE_PLAIN
        if "citations" in controls and documents:
            text += CITATIONS_33
        if "hallucinations" in controls and documents:
            text += HALLUCINATIONS_33
        return text

    def tools_block(self, chat: Chat) -> str:
        tools = self.tools(chat)
        return f"{START}available_tools{END}{tojson(tools, indent=4)}{EOT}\n" if tools else ""

    def documents_block(self, documents: Collection[JSON]) -> str:
        return "".join(
            f'{START}document {{"document_id": "{document_field(d, "doc_id")}"}}{END}\n{document_text(d)}{EOT}\n'
            for d in documents
        )


#: Granite 3.0's roles: the official template renders these and skips any other
ROLES_30 = {
    "system": "system", "user": "user", "assistant": "assistant", "assistant_tool_call": "assistant",
    "tool_response": "tool_response",
}


@template("granite-3.0", "granite-3.0-8b-instruct", "granite-3.0-2b-instruct", "granite3.0")
class Granite30(BaseTemplate):
    """Granite 3.0 Instruct: no default system prompt; tools first, in an ``available_tools`` block.

    The official template renders five roles and skips every other: ``system``,
    ``user``, ``assistant``, ``assistant_tool_call`` (an answer that is a call:
    ``<|tool_call|>`` then its content, the JSON list of calls) and
    ``tool_response`` (a tool's result). A ``tool`` message and ``tool_calls``
    are not rendered. The generation prompt follows the last message whatever
    its role.
    """

    official = "ibm-granite__granite-3.0-8b-instruct"
    hyperparameter_source = "granite-3.0-8b-instruct config.json (4K context); sampling: LMDeploy defaults"
    hf_special_tokens = {"eos_token": EOT}
    prefix_stable = True
    supports_tools = True
    tool_format = "granite"

    session_len: int = 4096
    assistant: str = f"{START}assistant{END}"
    eoa: str = EOT
    separator: str = "\n"
    stop_words: tuple[str, ...] | None = stops(EOT)

    def header(self, chat: Chat) -> str:
        if not chat.tools:
            return ""
        listed = "\n\n".join(tojson(t, indent=4) for t in chat.tools)
        return f"{START}available_tools{END}\n{listed}{EOT}\n"

    def piece(self, chat: Chat, i: int) -> str:
        role = chat.role(i)
        if role not in ROLES_30:
            return ""
        call = "<|tool_call|>" if role == "assistant_tool_call" else ""
        return f"{START}{ROLES_30[role]}{END}{call}{chat.text(i)}{EOT}\n"
