"""IBM Granite 3.1 Instruct: ``<|start_of_role|>{role}<|end_of_role|>{content}<|end_of_text|>\\n``.

The conversation always opens with a system block: the first message when it
is a system message, else a default prompt stating the knowledge cutoff and
today's date (``strftime_now``, here ``chat.today()``, frozen per session),
extended for tools, documents and controls. Tools follow as a ``tools`` block
and documents as a ``documents`` block. The model ends its turn with
``<|end_of_text|>`` (a stop word the engine keeps); the ``\\n`` after it comes
with the next turn's delta.
"""
from __future__ import annotations

from typing import Any

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


def document_text(document: Any) -> str:
    """What ``{{ document['text'] }}`` prints."""
    return jstr(document["text"]) if isinstance(document, dict) and "text" in document else ""


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
        tools, documents, controls = chat.tools, chat.kwargs.get("documents"), chat.kwargs.get("controls") or ()
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

    def header(self, chat: Chat) -> str:
        own = chat.role(0) == "system"
        out = [self.system, chat.text(0) if own else self.builtin_system(chat), self.eosys]
        if chat.tools:
            out += [f"{START}tools{END}", tojson(chat.tools, indent=4), f"{EOT}\n"]
        documents = chat.kwargs.get("documents")
        if documents:
            texts = [f"Document {k}\n{document_text(d)}" for k, d in enumerate(documents)]
            out += [f"{START}documents{END}", "\n\n".join(texts), f"{EOT}\n"]
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
