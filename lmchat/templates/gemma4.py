"""Gemma 4: ``<bos><|turn>user\\n{q}<turn|>\\n<|turn>model\\n``, with a system turn, thinking, tools and media.

Rendered from code, byte-exact with ``google__gemma-4-31B-it`` (``gemma4``) and ``google__gemma-4-E4B-it``
(``gemma4-e4b``). The two texts differ in one place: without thinking, the 31B's generation prompt closes an
empty thought channel (``<|channel>thought\\n<channel|>``), the E4B's does not: the 31B's history drops it, so
its sessions reset after each answer, and its continuation (``sequence_start=False``) is for an engine that
keeps the answer as the model wrote it (:meth:`.BaseTemplate._continuation`).

* A system turn ``<|turn>system\\n...<turn|>\\n`` opens the conversation when thinking is on (``<|think|>\\n``
  first), when tools are given (``<|tool>declaration:NAME{...}<tool|>`` each, :mod:`.gemma4_values`) or when
  the first message is a system or developer message (its text trimmed).
* Every other message is ``<|turn>{role}\\n{content}<turn|>\\n`` (``assistant`` is ``model``); text is trimmed,
  an answer's thought channels are dropped from it, images, audio and video parts are placeholders.
* An answer's reasoning (``reasoning``/``reasoning_content``) renders as ``<|channel>thought\\n{r}\\n<channel|>``
  only after the last user message (or on a call, with ``preserve_thinking``): a new query drops it.
* Calls are ``<|tool_call>call:NAME{key:value,...}<tool_call|>`` (arguments must be an object), the results
  that follow are rendered inside the same model turn as ``<|tool_response>response:NAME{...}<tool_response|>``,
  and the model turn stays open: the model answers right after them (with thinking, in an opened thought
  channel), and that answer renders without a new ``<|turn>model``. A call with no result yet ends with
  ``<|tool_response>``, where the model stops.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..errors import InvalidMessages, TemplateRuleError
from ..jsontypes import JSON
from ..registry import template
from .base import BaseTemplate, stops
from .chat import Chat
from .gemma4_values import argument, declaration, dictsort, is_sequence, iterate, tool_response
from .gpt_oss_tools import UNDEFINED
from .render_utils import jstr

TURN, END = "<|turn>", "<turn|>"
CHANNEL, CHANNEL_END = "<|channel>", "<channel|>"
THOUGHT = f"{CHANNEL}thought\n"
CALL, CALL_END, RESPONSE = "<|tool_call>", "<tool_call|>", "<|tool_response>"
MEDIA = {"image": "<|image|>", "image_url": "<|image|>", "audio": "<|audio|>", "input_audio": "<|audio|>",
         "video": "<|video|>"}
SYSTEM_ROLES = ("system", "developer")
ARGUMENTS_ERROR = ("chat_template: tool_calls[].function.arguments must be a JSON object (mapping), not a string. "
                   "Deserialize arguments before passing to the template.")


def strip_thinking(text: JSON, i: int) -> str:
    """The official ``strip_thinking`` macro: text outside ``<|channel>...<channel|>``, trimmed."""
    if not isinstance(text, str):
        raise InvalidMessages("an answer's text must be a string", index=i, field="content")
    kept = [part.split(CHANNEL)[0] if CHANNEL in part else part for part in text.split(CHANNEL_END)]
    return "".join(kept).strip()


# Any here: a message, its content parts and calls as the template reads them: any value Jinja may read
def _part_get(part: JSON, key: str, i: int, field: str) -> Any:
    if not isinstance(part, Mapping):
        raise InvalidMessages("each content part must be an object", index=i, field=field)
    return part.get(key)


def _trimmed(value: JSON) -> str:
    """``value | trim``: nothing for an undefined value, else ``str()`` stripped."""
    return "" if value is UNDEFINED else jstr(value).strip()


def first_in_loop(chat: Chat) -> int:
    """Where the official ``loop_messages`` start: after a leading system or developer message."""
    return 1 if chat.role(0) in SYSTEM_ROLES else 0


def _next_non_tool(chat: Chat, i: int) -> int | None:
    return next((j for j in range(i + 1, len(chat.messages)) if chat.role(j) != "tool"), None)


def _previous_non_tool(chat: Chat, i: int) -> int | None:
    first = first_in_loop(chat)
    return next((j for j in range(i - 1, first - 1, -1) if chat.role(j) != "tool"), None)


def _calls(m: Mapping[str, Any], i: int) -> list[Mapping[str, Any]]:
    """The ``function`` of each call, checked as the template reads them (a string name, object arguments)."""
    calls = m["tool_calls"]
    if not isinstance(calls, list):
        raise InvalidMessages("tool_calls must be a list of calls", index=i, field="tool_calls")
    out = []
    for call in calls:
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise InvalidMessages("each tool call needs a function with a string name", index=i, field="tool_calls")
        out.append(fn)
    return out


def _call_text(fn: Mapping[str, Any], i: int) -> str:
    args = fn.get("arguments", UNDEFINED)
    if isinstance(args, Mapping):
        body = ",".join(jstr(k) + ":" + argument(v, escape_keys=False) for k, v in dictsort(args, "arguments"))
    elif args is None:
        body = ""
    else:
        raise TemplateRuleError("arguments-object", ARGUMENTS_ERROR, index=i, field="tool_calls")
    return f"{CALL}call:{fn['name']}{{{body}}}{CALL_END}"


class _Results:
    """The tool results an answer renders inside its turn: ``tool_responses`` on it, or the tool messages after
    its calls."""

    def __init__(self, chat: Chat, i: int, functions: list[Mapping[str, Any]] | None):
        self.text, self.rendered = "", False
        m = chat.messages[i]
        legacy = m.get("tool_responses")
        if legacy:
            for item in iterate(legacy, "tool_responses"):
                name = (item.get("name") if isinstance(item, Mapping) else None) or "unknown"  # default(.., true)
                if not isinstance(name, str):
                    raise InvalidMessages("a tool response's name must be a string", index=i, field="tool_responses")
                response = item.get("response", UNDEFINED) if isinstance(item, Mapping) else UNDEFINED
                self.text += tool_response(name, response)
                self.rendered = True
        elif functions:
            for k in range(i + 1, len(chat.messages)):
                if chat.role(k) != "tool":
                    break
                self.text += self._result(chat, k, m["tool_calls"], functions)
                self.rendered = True

    @staticmethod
    def _result(chat: Chat, k: int, calls: list[Mapping[str, JSON]], functions: list[Mapping[str, Any]]) -> str:
        follow = chat.messages[k]
        name = follow.get("name") or "unknown"
        for call, fn in zip(calls, functions, strict=True):
            if call.get("id") == follow.get("tool_call_id"):
                name = fn["name"]
        if not isinstance(name, str):
            raise InvalidMessages("a tool result's name must be a string", index=k, field="name")
        body = follow.get("content")
        if isinstance(body, str) or not is_sequence(body) or body is None:
            return tool_response(name, body)
        parts = list(body)
        texts = []
        for part in parts:
            if _part_get(part, "type", k, "content") == "text":
                value = part.get("text")
                if not isinstance(value, str):
                    raise InvalidMessages("a text part needs a string text", index=k, field="content")
                texts.append(value)
        media = "".join(MEDIA.get(p.get("type"), "") if isinstance(p.get("type"), str) else "" for p in parts)
        return tool_response(name, "".join(texts)) + media


@template("gemma4", "gemma-4-31b-it", "gemma-4-31B-it", "gemma-4-31b", "gemma4-31b")
class Gemma4(BaseTemplate):
    """Gemma-4-31B-it (see the module docstring); ``enable_thinking`` switches thinking on."""

    official = "google__gemma-4-31B-it"
    hyperparameter_source = (
        "Gemma 4 model card's recommended sampling as remembered, not checked here (temperature 1.0, top_p 0.95, "
        "top_k 64, Gemma 3's generation_config.json values); context 256K for the 31B (model card, as remembered); "
        "stop at <turn|>, at <|tool_response> after calls (where the template ends a call's turn) and at <eos>"
    )
    hf_special_tokens = {"bos_token": "<bos>"}
    supports_tools = True
    tool_format = "gemma4"
    reasoning = True
    #: the generation prompt without thinking closes an empty thought channel (the 31B's text)
    empty_thought: ClassVar[bool] = True

    session_len: int = 262144
    top_p: float = 0.95
    top_k: int | None = 64
    temperature: float = 1.0
    bos: str = "<bos>"
    assistant: str = f"{TURN}model\n"
    eoa: str = END
    separator: str = "\n"
    stop_words: tuple[str, ...] | None = stops(END, RESPONSE, "<eos>")

    # ------------------------------------------------------------------ the system turn
    def header(self, chat: Chat) -> str:
        thinking = bool(chat.kwargs.get("enable_thinking"))
        system_first = bool(chat.messages) and chat.role(0) in SYSTEM_ROLES
        if not (thinking or chat.tools or system_first):
            return self.bos
        out = [self.bos, f"{TURN}system\n", "<|think|>\n" if thinking else ""]
        if system_first:
            content = chat.messages[0].get("content", UNDEFINED)
            if isinstance(content, str):
                out.append(content.strip())
            elif is_sequence(content) and content is not UNDEFINED:
                for item in content:
                    value = item.get("text", UNDEFINED) if isinstance(item, Mapping) else UNDEFINED
                    out.append(_trimmed(value) + " ")
        for k, tool in enumerate(chat.tools or ()):
            out.append("<|tool>" + declaration(tool, k) + "<tool|>")
        return "".join(out) + END + "\n"

    # ------------------------------------------------------------------ messages
    def rerender_from(self, chat: Chat, n_old: int) -> int:
        # an answer's piece reads the messages up to the next non-tool one (its results, whether its turn
        # stays open), and reasoning is kept only after the last user message: both may change
        last = _previous_non_tool(chat, n_old)
        user = next((j for j in range(n_old - 1, first_in_loop(chat) - 1, -1) if chat.role(j) == "user"), None)
        return max(0, min(last if last is not None else 0, user + 1 if user is not None else 0))

    def piece(self, chat: Chat, i: int) -> str:
        if i < first_in_loop(chat) or chat.role(i) == "tool":
            return ""  # the system message is in the header; results are rendered by the answer they follow
        m = chat.messages[i]
        role = "model" if m["role"] == "assistant" else m["role"]
        previous = _previous_non_tool(chat, i)
        continued = role == "model" and previous is not None and chat.role(previous) == "assistant"
        out = [] if continued else [f"{TURN}{role}\n"]
        out.append(self._thought(chat, i, m))
        functions = _calls(m, i) if m.get("tool_calls") else None
        if functions is not None:
            out.extend(_call_text(fn, i) for fn in functions)
        results = _Results(chat, i, functions)
        out.append(results.text)
        content = self._content(m, i, role)
        out.append(content)
        following = _next_non_tool(chat, i)
        into_next = (role == "model" and following is not None and chat.role(following) == "assistant"
                     and (functions is None or results.rendered))
        if functions is not None and not results.rendered:
            out.append(RESPONSE)
        elif into_next:
            pass
        elif not (results.rendered and not content.strip() and following is None):
            out.append(END + "\n")
        return "".join(out)

    @staticmethod
    def _last_user(chat: Chat) -> int:
        """The index of the last user message among the looped messages (before them when there is none)."""
        first = first_in_loop(chat)
        return next((j for j in range(len(chat.messages) - 1, first - 1, -1) if chat.role(j) == "user"), first - 1)

    def _thought(self, chat: Chat, i: int, m: Mapping[str, Any]) -> str:
        thinking = m.get("reasoning") or m.get("reasoning_content")
        gate = i > self._last_user(chat) or (chat.kwargs.get("preserve_thinking") and m.get("tool_calls"))
        if not (thinking and gate):
            return ""
        if not isinstance(thinking, str):
            raise InvalidMessages("reasoning must be a string", index=i, field="reasoning_content")
        return THOUGHT + thinking + "\n" + CHANNEL_END

    @staticmethod
    def _content(m: Mapping[str, Any], i: int, role: str) -> str:
        content = m.get("content")
        if isinstance(content, str):
            return strip_thinking(content, i) if role == "model" else content.strip()
        if content is None or not is_sequence(content):
            return ""
        out = []
        for part in content:
            kind = _part_get(part, "type", i, "content")
            if kind == "text":
                value = part.get("text", UNDEFINED)
                out.append(strip_thinking(value, i) if role == "model" else _trimmed(value))
            elif isinstance(kind, str):
                out.append(MEDIA.get(kind, ""))
        return "".join(out)

    # ------------------------------------------------------------------ the generation prompt
    def tail(self, chat: Chat) -> str:
        if not chat.add_generation_prompt:
            return ""
        thinking = bool(chat.kwargs.get("enable_thinking"))
        last = _previous_non_tool(chat, len(chat.messages))
        functions = results = None
        if last is not None:  # what the last answer ended with: its results, or calls awaiting them
            m = chat.messages[last]
            functions = _calls(m, last) if m.get("tool_calls") else None
            results = _Results(chat, last, functions).rendered
        if results:
            return THOUGHT if thinking else ""
        if functions is not None:
            return ""
        return self.assistant + ("" if thinking or not self.empty_thought else THOUGHT + CHANNEL_END)

    def answer_fields(self, answer: str) -> dict[str, JSON]:
        """A raw answer as the message its history renders: a leading thought channel as its reasoning. An answer
        that closes a channel it never opened started inside one: after tool results with thinking on, the
        generation prompt opens it."""
        head = answer.lstrip()
        if head.startswith(CHANNEL) and CHANNEL_END in head:
            thought, _, content = head[len(CHANNEL):].partition(CHANNEL_END)
            thought = thought.removeprefix("thought").removeprefix("\n")
        elif CHANNEL_END in answer and CHANNEL not in answer.partition(CHANNEL_END)[0]:
            thought, _, content = answer.partition(CHANNEL_END)
        else:
            return {"content": answer}
        return {"content": content, "reasoning_content": thought.removesuffix("\n")}


@template("gemma4-e4b", "gemma-4-e4b-it", "gemma-4-E4B-it", "gemma-4-e4b", "gemma-4-e2b-it", "gemma-4-E2B-it",
          "gemma-4-e2b")
class Gemma4E4B(Gemma4):
    """Gemma-4-E4B-it (and E2B, the same release; its file assumed the same, not checked): the 31B's template
    whose generation prompt without thinking is a bare ``<|turn>model\\n``."""

    official = "google__gemma-4-E4B-it"
    hyperparameter_source = (
        "Gemma 4 model card's recommended sampling as remembered, not checked here (temperature 1.0, top_p 0.95, "
        "top_k 64); context 128K for the E2B/E4B models (model card, as remembered); stops as gemma4"
    )
    prefix_stable = True
    empty_thought: ClassVar[bool] = False

    session_len: int = 131072
