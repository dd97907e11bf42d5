"""Request bodies, checked whole before anything is touched. Unknown fields are accepted and ignored,
as OpenAI-compatible servers do: clients send fields (``logprobs``, ``presence_penalty``...) that
change nothing here.

Types are strict (``"yes"`` is not a boolean, ``1`` is not a stop word, ``1e100``
is not a token count), numbers finite and in range, and every body is
refused when it nests deeper than :data:`MAX_DEPTH` or holds a lone UTF-16
surrogate (text no store can encode). Messages and tools are kept as plain
dicts: the session validates them and names the message index and field at
fault, which types declared here could not do as precisely.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, model_validator

from ..jsontypes import JSON, JSONObject
from ..messages import Message
from ..validation import MAX_MESSAGES
from .errors import ApiError
from .wire import Tools

#: deeper JSON is refused (a conversation with tools nests about 10 levels)
MAX_DEPTH = 64
MAX_TOKENS = 1_000_000

Stop = StrictStr | list[StrictStr] | None
Finite = Annotated[StrictFloat, Field(allow_inf_nan=False)]  # ints are numbers too; "0.5" and true are not
#: a token budget (max_tokens, max_completion_tokens, max_output_tokens, request_output_len): at least 1 on every
#: route, as OpenAI refuses max_tokens 0 (``integer_below_min_value``): an answer of no token is no answer
Count = Annotated[StrictInt, Field(ge=1, le=MAX_TOKENS)]
#: a session id a client names: never empty (an empty one would silently mean "no session")
SessionId = Annotated[StrictStr, Field(min_length=1)]


#: a value's place in a body, kept as its key and its parent's place: (key, parent) or None for the body itself
Place = tuple[str | int, "Place"] | None


def check_json(value: JSON) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` and lone surrogates, walking ``value`` iteratively: a 400
    naming the field at fault (``response_format.json_schema.schema.properties.a...``), as a pydantic error
    would."""
    stack: list[tuple[JSON, int, Place]] = [(value, 1, None)]
    while stack:
        item, depth, place = stack.pop()
        if depth > MAX_DEPTH:
            raise _refused(place, f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(item, str):
            _text(item, place)
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str):
                    _text(key, place)
                stack.append((child, depth + 1, (key, place)))
        elif isinstance(item, list):
            stack.extend((child, depth + 1, (i, place)) for i, child in enumerate(item))


def _text(text: str, place: Place) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _refused(place, f"a lone UTF-16 surrogate {text[exc.start]!r} is not text: send valid UTF-8") from None


def _refused(place: Place, reason: str) -> ApiError:
    """The 400 for the value at ``place`` (raised past pydantic, which would name the whole body)."""
    keys: list[str | int] = []
    while place is not None:
        key, place = place
        keys.append(key)
    param = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in reversed(keys)).lstrip(".") or None
    return ApiError(400, f"{param or 'body'}: {reason}", param=param, code="invalid_value")


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _sound_json(cls, data: JSON) -> JSON:
        check_json(data)
        return data


class StreamOptions(_Body):
    """OpenAI's ``stream_options``; ``include_usage``: a last chunk with the usage."""

    include_usage: StrictBool = False


class _Sampling(_Body):
    """Sampling fields both protocols share; None: the template's bundled value."""

    temperature: Finite | None = Field(None, ge=0, le=100)
    top_p: Finite | None = Field(None, gt=0, le=1)
    top_k: StrictInt | None = Field(None, ge=0, le=MAX_TOKENS)
    repetition_penalty: Finite | None = Field(None, gt=0, le=100)
    seed: StrictInt | None = Field(None, ge=0, le=2**63 - 1)
    stop: Stop = None

    def sampling(self) -> dict[str, float | None]:
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k or None,
                "repetition_penalty": self.repetition_penalty, "seed": self.seed}


class InteractiveRequest(_Sampling):
    """LMDeploy's ``/v1/chat/interactive`` body (``session_id=-1``: a new session)."""

    prompt: StrictStr | list[Message] = ""
    # early LMDeploy clients sent ``stop`` as a bool: true meant what ``cancel`` means now
    # (a wider type than _Sampling's, as pydantic allows a subclass's field: mypy's assignment rule does not)
    stop: StrictStr | list[StrictStr] | StrictBool | None = None  # type: ignore[assignment]
    session_id: StrictInt | StrictStr = -1
    interactive_mode: StrictBool = False
    stream: StrictBool = False
    request_output_len: Count | None = None
    ignore_eos: StrictBool = False
    skip_special_tokens: StrictBool = True
    cancel: StrictBool = False


class ChatRequest(_Sampling):
    """OpenAI's chat completion body, plus ``session_id`` (or ``user``) to keep a session."""

    model: StrictStr | None = None
    messages: list[Message] = Field(min_length=1, max_length=MAX_MESSAGES)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    tools: Tools | None = None
    tool_choice: StrictStr | JSONObject | None = None  # checked against the tools (validation.check_tool_choice)
    parallel_tool_calls: StrictBool | None = None  # a forced tool_choice: one call (false) or one or more
    max_tokens: Count | None = None
    max_completion_tokens: Count | None = None
    n: StrictInt = 1
    session_id: SessionId | None = None
    user: StrictStr | None = None
    #: structured outputs, checked by :func:`.formats.chat_constraint` (it names the field at fault)
    response_format: JSONObject | None = None


class CompletionRequest(_Sampling):
    """OpenAI's (legacy) completion body: one raw prompt, no template, no session."""

    model: StrictStr | None = None
    prompt: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]  # text or token ids, as OpenAI's
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    max_tokens: Count = 16  # OpenAI's default
    n: StrictInt = 1
    echo: StrictBool = False
    #: as chat's (vLLM and SGLang take it here too): a remote lmchat backend sends it to an lmchat upstream
    response_format: JSONObject | None = None


class NewSession(_Body):
    session_id: SessionId | None = None
    system: StrictStr | None = None
    tools: Tools | None = None
    template: StrictStr | None = None


class Fork(_Body):
    session_id: SessionId | None = None  # the new session's id (None: a random one)
