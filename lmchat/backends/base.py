"""The backend protocol shared by the REPL and the server."""
from __future__ import annotations

import importlib
from typing import Any, Iterator, Protocol, runtime_checkable

import attrs

from ..errors import TemplateConfigError
from ..session import Delta, Session

#: backend name -> "module:factory" (imported only when chosen)
BACKENDS = {
    "embedded": "lmchat.backends.embedded:EmbeddedBackend",
    "echo": "lmchat.backends.echo:EchoBackend",
    "remote": "lmchat.backends.remote:RemoteBackend",
}


@attrs.frozen(kw_only=True)
class SamplingParams:
    """Sampling for one turn; defaults come from the template's bundled values."""

    temperature: float = 0.8
    top_p: float = 0.8
    top_k: int | None = None
    repetition_penalty: float = 1.0
    max_new_tokens: int = 512
    stop: tuple[str, ...] = ()
    seed: int | None = None

    @classmethod
    def from_template(cls, template, **overrides: Any) -> "SamplingParams":
        base = {
            "temperature": template.temperature,
            "top_p": template.top_p,
            "top_k": template.top_k,
            "repetition_penalty": template.repetition_penalty,
            "stop": tuple(template.stop_words or ()),
        }
        base.update({k: v for k, v in overrides.items() if v is not None})
        if isinstance(base.get("stop"), (list, str)):
            base["stop"] = (base["stop"],) if isinstance(base["stop"], str) else tuple(base["stop"])
        return cls(**base)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


@attrs.frozen(kw_only=True)
class GenerationRequest:
    """One turn for a backend.

    ``delta`` is what the session computed (``delta.reset``: drop the cache
    first). ``context_ids``/``context`` are what the engine must hold once the
    delta is consumed (the session's ``context_ids``/``context``): a stateful
    backend checks its cache against them and rebuilds from them if it lost
    it; a stateless one sends ``context`` whole. ``messages`` is the
    conversation the context renders (for backends that answer from the
    messages rather than the prompt, such as the echo backend).
    """

    session_id: str
    delta: Delta
    params: SamplingParams
    context: str
    context_ids: tuple[int, ...] | None = None
    messages: tuple[dict, ...] = ()

    @classmethod
    def from_session(cls, session: Session, delta: Delta, params: SamplingParams) -> "GenerationRequest":
        ids = session.context_ids
        return cls(
            session_id=session.session_id,
            delta=delta,
            params=params,
            context=session.context,
            context_ids=None if ids is None else tuple(ids),
            messages=tuple(session.messages),
        )


@attrs.frozen(kw_only=True)
class Chunk:
    """A piece of streamed output; the last chunk has ``finish_reason``.

    ``finish_reason``: ``'stop'`` (a stop word or the model's end marker fired;
    ``stop`` says which), ``'length'`` (``max_new_tokens`` reached),
    ``'cancelled'``. ``token_ids`` are generated ids (never the stop token).
    The last chunk also carries ``prefilled`` (prompt tokens computed this
    turn) and ``reused`` (prompt tokens served from the cache).
    """

    text: str = ""
    token_ids: tuple[int, ...] = ()
    finish_reason: str | None = None
    stop: str | None = None
    prefilled: int = 0
    reused: int = 0


@runtime_checkable
class Backend(Protocol):
    """What the REPL and the server need from an inference engine."""

    name: str
    #: a tokenizer sessions should use for token deltas (None: text-only backend)
    tokenizer: Any

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]: ...

    def cancel(self, session_id: str) -> None:
        """Stop the generation running for ``session_id`` (the stream ends with 'cancelled')."""

    def drop(self, session_id: str) -> None:
        """Forget the cached state of ``session_id``."""

    def close(self) -> None: ...


def get_backend(name: str, **options: Any) -> Backend:
    """Instantiate a backend by name (``embedded``, ``echo``, ``remote``)."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise TemplateConfigError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})", field="backend") from None
    module, factory = target.split(":")
    return getattr(importlib.import_module(module), factory)(**options)
