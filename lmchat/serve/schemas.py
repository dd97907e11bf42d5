"""Request bodies. Unknown fields are accepted and ignored, as OpenAI-compatible servers do:
clients send fields (``logprobs``, ``presence_penalty``...) that change nothing here.

Messages and tools are kept as plain dicts: the session validates them and
names the message index and field at fault, which types declared here could
not do as precisely.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Stop = str | list[str] | None


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Sampling(_Body):
    """Sampling fields both protocols share; None: the template's bundled value."""

    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)
    repetition_penalty: float | None = Field(None, gt=0)
    seed: int | None = None
    stop: Stop = None

    def sampling(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k or None,
                "repetition_penalty": self.repetition_penalty, "seed": self.seed}


class InteractiveRequest(_Sampling):
    """LMDeploy's ``/v1/chat/interactive`` body (``session_id=-1``: a new session)."""

    prompt: str | list[dict[str, Any]] = ""
    # early LMDeploy clients sent ``stop`` as a bool: true meant what ``cancel`` means now
    stop: str | list[str] | bool | None = None
    session_id: int | str = -1
    interactive_mode: bool = False
    stream: bool = False
    request_output_len: int | None = Field(None, ge=0)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    cancel: bool = False


class ChatRequest(_Sampling):
    """OpenAI's chat completion body, plus ``session_id`` (or ``user``) to keep a session."""

    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int = 1
    session_id: str | None = None
    user: str | None = None


class CompletionRequest(_Sampling):
    """OpenAI's (legacy) completion body: one raw prompt, no template, no session."""

    model: str | None = None
    prompt: str | list[str]
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    max_tokens: int = Field(16, ge=0)  # OpenAI's default
    n: int = 1
    echo: bool = False


class NewSession(_Body):
    session_id: str | None = None
    system: str | None = None
    tools: list[dict[str, Any]] | None = None
    template: str | None = None


class Fork(_Body):
    session_id: str | None = None  # the new session's id (None: a random one)
