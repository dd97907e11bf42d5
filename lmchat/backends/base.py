"""The backend protocol shared by the REPL and the server."""
from __future__ import annotations

from typing import Any, Iterator, Protocol, runtime_checkable

import attrs

from ..errors import ConfigError
from ..extras import load
from ..session import Delta, Session

#: backend name -> "module:factory" (imported only when chosen)
BACKENDS = {
    "embedded": "lmchat.backends.embedded:EmbeddedBackend",
    "echo": "lmchat.backends.echo:EchoBackend",
    "remote": "lmchat.backends.remote:RemoteBackend",
}
#: the extra each backend needs (the echo backend needs none)
BACKEND_EXTRAS = {"embedded": "local", "remote": "remote"}


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

    @property
    def held(self) -> int | None:
        """How many ids (characters without a tokenizer) the engine should hold before the delta
        (after applying ``delta.discard``); None for a reset (it holds nothing it may keep)."""
        if self.delta.reset:
            return None
        if self.context_ids is not None:
            return len(self.context_ids) - len(self.delta.token_ids or ())
        return len(self.context) - len(self.delta.text)

    def full_ids(self) -> list[int]:
        """Every id the engine holds once the delta is consumed: for rebuilding a lost cache."""
        if self.context_ids is None:
            raise ValueError("a request without token ids (the session has no tokenizer)")
        return list(self.context_ids)

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
    turn) and ``reused`` (prompt tokens served from the cache); the session
    manager adds ``cache_miss_reason``, why the engine could not reuse all it
    held (the delta's ``reason``: a reset, a drift rewind, an overflow).
    """

    text: str = ""
    token_ids: tuple[int, ...] = ()
    finish_reason: str | None = None
    stop: str | None = None
    prefilled: int = 0
    reused: int = 0
    cache_miss_reason: str | None = None


@runtime_checkable
class Backend(Protocol):
    """What the REPL and the server need from an inference engine."""

    name: str
    #: which model answers (a file name, a served model); with ``name``, the engine a session belongs to
    model_id: str
    #: a tokenizer sessions should use for token deltas (None: text-only backend)
    tokenizer: Any

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]: ...

    def cancel(self, session_id: str) -> None:
        """Stop the generation running for ``session_id`` (the stream ends with 'cancelled')."""

    def drop(self, session_id: str) -> None:
        """Forget the cached state of ``session_id``."""

    def close(self) -> None: ...


def engine_id(backend: Backend) -> str:
    """``name:model`` (e.g. ``embedded:SmolLM2-135M-Instruct-Q4_K_M.gguf``): what a stored session belongs to."""
    return f"{backend.name}:{getattr(backend, 'model_id', '') or 'default'}"


def get_backend(name: str, **options: Any) -> Backend:
    """Instantiate a backend by name (``embedded``, ``echo``, ``remote``)."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise ConfigError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})", field="backend") from None
    return load(target, f"the {name} backend", BACKEND_EXTRAS.get(name))(**options)
