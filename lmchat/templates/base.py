"""The template base class: bundled sampling settings plus a piecewise renderer.

A rendering is ``header + piece(0) + piece(1) + ... + piece(n-1) + tail``:

* ``header(chat)``: what precedes the first message (bos, a default system prompt);
* ``piece(chat, i)``: the text of message ``i`` (it may read any message, e.g. its
  neighbours to group tool results);
* ``tail(chat)``: the generation prompt, when asked for.

Full rendering and per-turn deltas use the same code. A session re-renders only
the pieces from ``rerender_from(chat, n_old)`` on, which is O(turn); a template
whose pieces depend on messages further away (reasoning kept after the last
query, a system prompt moved to the last user turn) says so by overriding it.
"""
from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import attrs

from ..errors import InvalidMessages, TemplateConfigError, TemplateRuleError
from ..jsontypes import JSON
from ..messages import normalize_messages
from . import continued
from .chat import Chat
from .fields import check_overrides, honoured
from .sampling import DEFAULT_SAMPLING, SAMPLING_FIELDS


def _stop_words(value: str | Iterable[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    return tuple(value)


# Any here: messages, tools and template keywords as a chat template reads them (any value Jinja may read), and
# template field values (attrs fields of several types: to_dict, from_dict, evolve, sampling_params)
def stops(*words: str) -> Any:  # an attrs field: Any, as attrs.field is
    """Field declaration of a template's default stop words (keeps the converter on override)."""
    return attrs.field(default=words or None, converter=_stop_words)


def _capability(instance: object, attribute: object, value: object) -> None:
    if value not in ("chat", "completion"):
        raise TemplateConfigError(f"must be 'chat' or 'completion', got {value!r}", field="capability")


@attrs.frozen(kw_only=True)
class BaseTemplate:
    """A chat template with the sampling settings of its model.

    Instances are frozen: everything that changes during a conversation lives in
    the session. The string fields use LMDeploy's vocabulary; ``eoa`` is the
    end-of-turn marker the model emits itself (a stop word, kept by the engine in
    its KV cache), ``separator`` what the template puts after it, which the next
    turn's delta supplies. ``lead`` is text the model writes itself between the
    generation prompt and its answer's content (GLM's ``\n`` after
    ``<|assistant|>``, the space after Llama-2's ``[/INST]``): the engine keeps it,
    the message content does not.
    """

    registered_name: ClassVar[str | None] = None
    #: where the bundled sampling settings come from (shown by `lmchat templates`)
    hyperparameter_source: ClassVar[str] = "LMDeploy defaults (no model-specific values known)"
    #: the official chat template this one is byte-exact with (a corpus file stem), if any
    official: ClassVar[str | None] = None
    #: the model's second official template, which transformers renders when ``tools`` are given
    #: (a ``tool_use`` entry of its tokenizer config: Hermes, Command-R), if any
    official_tool_use: ClassVar[str | None] = None
    #: the ``bos_token``/``eos_token`` values the official template is rendered with
    hf_special_tokens: ClassVar[Mapping[str, str]] = {}
    #: plain conversations (no reasoning, no edge whitespace) never reset a session
    prefix_stable: ClassVar[bool] = False
    #: renders ``tools``, ``tool_calls`` and tool results as the official template does
    supports_tools: ClassVar[bool] = False
    #: the syntax the model writes tool calls in (a name in :data:`lmchat.tools.FORMATS`)
    tool_format: ClassVar[str] = "plain"
    #: the model may open its answer with a ``<think>`` block
    reasoning: ClassVar[bool] = False
    #: how the official template reads a tool call's ``function.arguments``: ``"object"`` (it renders them with
    #: ``tojson``) or ``"text"`` (it prints the JSON text as it is: DeepSeek, Kimi-K2, Functionary, FireFunction);
    #: a session keeps its calls in that form (:func:`lmchat.messages.calls_as`), whichever way they came
    call_arguments: ClassVar[Literal["object", "text"]] = "object"
    #: the ``reasoning_effort`` values the template takes (gpt-oss: low, medium, high), which the Responses API's
    #: ``reasoning.effort`` sets; none: reasoning is on or off at most (Qwen3's ``enable_thinking``)
    reasoning_efforts: ClassVar[tuple[str, ...]] = ()

    session_len: int = 2048
    top_p: float = DEFAULT_SAMPLING["top_p"]
    top_k: int | None = DEFAULT_SAMPLING["top_k"]
    temperature: float = DEFAULT_SAMPLING["temperature"]
    repetition_penalty: float = DEFAULT_SAMPLING["repetition_penalty"]
    capability: str = attrs.field(default="chat", validator=_capability)
    stop_words: tuple[str, ...] | None = attrs.field(default=None, converter=_stop_words)

    bos: str = ""
    system: str = ""
    meta_instruction: str | None = None
    eosys: str = ""
    user: str = ""
    eoh: str = ""
    assistant: str = ""
    eoa: str = ""
    separator: str = ""
    lead: str = ""

    # ------------------------------------------------------------------ rendering
    def header(self, chat: Chat) -> str:
        """Text before the first message."""
        return self.bos

    def piece(self, chat: Chat, i: int) -> str:
        """Text of message ``i``."""
        raise NotImplementedError

    def tail(self, chat: Chat) -> str:
        """Text after the last message: the generation prompt when asked for."""
        return self.assistant if chat.add_generation_prompt else ""

    def rerender_from(self, chat: Chat, n_old: int) -> int:
        """First message whose piece may change when messages are appended after ``n_old``.

        The default covers pieces that look at their next neighbour (tool
        results grouped into one block, an end marker only on the last turn).
        """
        return max(0, n_old - 1)

    def answer_fields(self, answer: str) -> dict[str, JSON]:
        """The fields of the assistant message a model's raw answer is stored as: its content, without the
        ``lead``. A template whose model writes, around its answer, markup that the history renders from
        other fields (gpt-oss's channels: reasoning in ``thinking``) splits the answer here."""
        lead = self.lead
        return {"content": answer[len(lead):] if lead and answer.startswith(lead) else answer}

    def check(self, chat: Chat) -> None:
        """Conversation-wide rules, checked before rendering a whole conversation."""
        if not chat.messages:
            raise InvalidMessages("empty conversation: at least one message is required")

    def render_window(self, chat: Chat, start: int) -> tuple[str, list[int]]:
        """Render pieces ``start..n-1`` plus the tail (and the header when ``start == 0``).

        Returns the text and the offsets, within it, where each piece starts;
        the last offset is where the tail starts. A 'completion' template
        renders bare content.
        """
        completion = self.capability == "completion"
        parts = [self.header(chat)] if start == 0 and not completion else []
        pos = len(parts[0]) if parts else 0
        offsets = []
        for i in range(start, len(chat.messages)):
            p = chat.text(i) if completion else self.piece(chat, i)
            offsets.append(pos)
            parts.append(p)
            pos += len(p)
        offsets.append(pos)
        if not completion:
            parts.append(self.tail(chat))
        return "".join(parts), offsets

    def render(self, chat: Chat) -> str:
        self.check(chat)
        return self.render_window(chat, 0)[0]

    def make_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        date: _dt.date | None = None,
        **template_kwargs: Any,
    ) -> Chat:
        messages = normalize_messages(messages)
        default = self.default_system
        if default is not None and (not messages or messages[0]["role"] != "system"):
            messages.insert(0, {"role": "system", "content": default})
        return Chat(
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            date=date,
            kwargs=template_kwargs,
        )

    # ------------------------------------------------------------------ LMDeploy API
    def messages2prompt(
        self,
        messages: str | Sequence[Mapping[str, Any]],
        sequence_start: bool = True,
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool | None = None,
        continue_final_message: bool | str = False,
        date: _dt.date | None = None,
        **template_kwargs: Any,
    ) -> str:
        """Render an OpenAI-style conversation (or a bare prompt string).

        With ``sequence_start=False`` the result is what a session that already
        holds a finished exchange receives for these messages (no meta
        instruction, the glue after the last answer first).
        ``continue_final_message`` (transformers' option; a field name such as
        ``'reasoning_content'`` picks another field than ``'content'``) leaves
        the final message open after its text, for the model to continue; it
        excludes the generation prompt, which is otherwise on by default.
        """
        if isinstance(messages, str):
            return self.get_prompt(messages, sequence_start)
        if continue_final_message and add_generation_prompt:
            raise TemplateConfigError("continue_final_message and add_generation_prompt are not compatible",
                                      field="continue_final_message")
        generation = not continue_final_message if add_generation_prompt is None else add_generation_prompt
        if not sequence_start:
            return self._continuation(messages, tools=tools, date=date, **template_kwargs)
        if continue_final_message:
            field = continued.field_of(continue_final_message)
            messages, text = continued.tagged(normalize_messages(messages), field)
            chat = self.make_chat(messages, tools=tools, add_generation_prompt=False, date=date, **template_kwargs)
            return continued.cut(self.render(chat), text)
        chat = self.make_chat(messages, tools=tools, add_generation_prompt=generation, date=date, **template_kwargs)
        return self.render(chat)

    def get_prompt(self, prompt: str, sequence_start: bool = True) -> str:
        if self.capability == "completion":
            return prompt
        return self.decorate_prompt(prompt, sequence_start)

    def decorate_prompt(self, prompt: str, sequence_start: bool = True) -> str:
        """The prompt of one user turn; the meta instruction only when ``sequence_start``."""
        if self.capability != "chat":
            raise TemplateConfigError(f"{self.name} has no chat capability", field="capability")
        message = [{"role": "user", "content": prompt}]
        if sequence_start:
            return self.messages2prompt(message)
        return self._continuation(message)

    def _continuation(self, messages: Sequence[Mapping[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                      date: _dt.date | None = None, **template_kwargs: Any) -> str:
        """What a session that holds one finished exchange receives for ``messages``.

        The engine holds the first turn's prompt and an answer as the model
        writes it (``lead``, text, ``eoa``); the continuation is the rest of the
        full rendering, which must start with exactly that. Where the generation
        prompt opens text that the rendered history of an answer drops (a
        ``<think>\\n``, CodeLlama-70B's ``Destination: user``, Gemma 4's empty
        thought channel), the engine keeps the answer as the model wrote it after
        that opening, as LMDeploy's interactive mode did: the continuation is what
        the full rendering writes after the answer's ``eoa``. A session, which
        keeps what the history renders, resets there instead.
        """
        options = {"tools": tools, "date": date, **template_kwargs}
        first = [{"role": "user", "content": "\x00"}]
        prompt = self.messages2prompt(first, **options)
        held = prompt + self.lead + "\x01" + self.eoa
        full = self.messages2prompt([*first, {"role": "assistant", "content": "\x01"}, *messages], **options)
        if full.startswith(held):
            return full[len(held):]
        opened = self.tail(self.make_chat(first, **options))
        answer = full.find("\x01" + self.eoa)
        if opened and prompt.endswith(opened) and full.startswith(prompt[:-len(opened)]) and answer >= 0:
            return full[answer + 1 + len(self.eoa):]
        raise TemplateRuleError(
            "history-rewrite",
            f"template {self.name!r} has no continuation: its rendered history of an answer rewrites the first "
            "turn's prompt; render the whole conversation instead",
        )

    # ------------------------------------------------------------------ metadata
    @classmethod
    def official_variables(cls, tools: JSON, date: _dt.date | None) -> dict[str, Any]:
        """Template variables, besides messages and tools, that the official template needs and its model's
        serving stack derives from the request (FireFunction's ``functions`` and ``datetime``): the template
        renders them when the caller gives none, and the conformance tests give them to the official template."""
        return {}

    @property
    def name(self) -> str:
        return self.registered_name or type(self).__name__

    @property
    def default_system(self) -> str | None:
        """The system prompt a conversation without one gets: ``meta_instruction`` on a template
        that does not render it itself (LMDeploy's meaning of the field); None otherwise."""
        if self.meta_instruction is None:
            return None
        return None if "meta_instruction" in honoured(self) else self.meta_instruction

    @property
    def sampling_params(self) -> dict[str, Any]:
        """The bundled sampling settings."""
        return {f: getattr(self, f) for f in SAMPLING_FIELDS}

    def to_dict(self) -> dict[str, Any]:
        """Registered name plus every field that differs from the class defaults."""
        defaults = type(self)()
        out: dict[str, Any] = {"name": self.name}
        for a in attrs.fields(type(self)):
            value = getattr(self, a.name)
            if value != getattr(defaults, a.name):
                out[a.name] = list(value) if isinstance(value, tuple) else value
        return out

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> BaseTemplate:
        from ..registry import get_template

        data = dict(data)
        try:
            name = data.pop("name")
        except KeyError:
            raise TemplateConfigError("missing", field="name") from None
        template: BaseTemplate = get_template(name, **data)
        return template

    def evolve(self, **changes: Any) -> BaseTemplate:
        """A copy with ``changes``; a field this template would ignore is refused (:mod:`.fields`)."""
        check_overrides(self, changes)
        return attrs.evolve(self, **changes)
