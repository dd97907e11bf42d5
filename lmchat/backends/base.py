"""The backend protocol shared by the REPL and the server."""
from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import attrs

from ..constraints import Budget, Constraint
from ..errors import ConfigError, ConstraintUnsupported
from ..extras import load
from ..session import Delta, Session
from ..session.vocab import Tokenizer
from ..templates.base import BaseTemplate
from ..templates.sampling import DEFAULT_SAMPLING

#: backend name -> "module:factory" (imported only when chosen)
BACKENDS = {
    "llamacpp": "lmchat.backends.llamacpp:LlamaCppBackend",
    "hf": "lmchat.backends.hf:HFBackend",
    "echo": "lmchat.backends.echo:EchoBackend",
    "remote": "lmchat.backends.remote:RemoteBackend",
}
#: other names a backend answers to: ``embedded`` is the bundled model's engine
BACKEND_ALIASES = {"embedded": "llamacpp"}
#: the extra each backend needs (the echo backend needs none)
BACKEND_EXTRAS = {"llamacpp": "local", "hf": "hf", "remote": "remote"}


@attrs.frozen(kw_only=True)
class SamplingParams:
    """Sampling for one turn; defaults come from the template's bundled values."""

    temperature: float = DEFAULT_SAMPLING["temperature"]
    top_p: float = DEFAULT_SAMPLING["top_p"]
    top_k: int | None = DEFAULT_SAMPLING["top_k"]
    repetition_penalty: float = DEFAULT_SAMPLING["repetition_penalty"]
    max_new_tokens: int = 512
    stop: tuple[str, ...] = ()
    seed: int | None = None
    #: what the answer must be (JSON, a schema, a grammar): only masks sampling (:mod:`lmchat.constraints`)
    constraint: Constraint | None = None

    @classmethod
    # Any: sampling values by name (temperature, stop...), checked by SamplingParams' own fields; below, a
    # backend's constructor options (get_backend) and an engine's stats, JSON of several shapes read by name
    def from_template(cls, template: BaseTemplate, **overrides: Any) -> SamplingParams:
        base: dict[str, Any] = {
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


@attrs.frozen
class Prompt:
    """Everything the engine holds for a session once a delta is consumed: text, and ids with a tokenizer."""

    text: str
    ids: tuple[int, ...] | None = None


@attrs.frozen(kw_only=True)
class GenerationRequest:
    """One turn for a backend: O(turn) to build and to send.

    ``delta`` is what the session computed: ``delta.reset`` means drop what is
    held for the session first; ``delta.discard=(start, count)`` a range to
    drop from it; then ``delta.token_ids`` (``delta.text`` without a
    tokenizer) extend it. ``held`` is how much the engine should hold before
    the delta once the discard is applied (ids with a tokenizer, else
    characters; None with a reset): a stateful backend compares it with what
    it holds and, when they differ (its cache was lost or evicted), rebuilds
    from :meth:`prompt`, the whole context. A stateless backend (a remote
    server) sends :meth:`prompt` every time. ``last_user`` is the text of
    the conversation's last user message (the echo backend answers it).
    ``progress``, when given, is called as the engine computes the prompt:
    ``(done, total)`` ids of what it prefills this turn (the llamacpp backend,
    once before its first batch and after each; from the engine's thread, so
    it must only note the values).
    """

    session_id: str
    delta: Delta
    params: SamplingParams
    held: int | None = None
    last_user: str = ""
    source: Callable[[], Prompt] = attrs.field(repr=False, eq=False, default=lambda: Prompt(""))
    progress: Callable[[int, int], None] | None = attrs.field(repr=False, eq=False, default=None)

    def prompt(self) -> Prompt:
        """The whole context after the delta (O(history): only for rebuilds and stateless servers).

        Call it before the turn's answer is committed (i.e. while generating).
        """
        return self.source()

    @classmethod
    def from_session(cls, session: Session, delta: Delta, params: SamplingParams,
                     key: str | None = None, progress: Callable[[int, int], None] | None = None
                     ) -> GenerationRequest:
        """The request for ``delta``, which ``session`` has just applied; ``key`` names the session for
        the backend (default: its id; a server namespaces ids by owner)."""
        size = len(delta.token_ids or ()) if session.counts_tokens else len(delta.text)
        cached: list[Prompt] = []

        def source() -> Prompt:
            if not cached:  # once: the session moves on when the answer is committed
                ids = session.context_ids
                cached.append(Prompt(session.context, None if ids is None else tuple(ids)))
            return cached[0]

        return cls(session_id=key or session.session_id, delta=delta, params=params,
                   held=None if delta.reset else session.step - size, last_user=session.last_user(),
                   source=source, progress=progress)


@attrs.frozen(kw_only=True)
class Chunk:
    """A piece of streamed output; the last chunk has ``finish_reason``.

    ``finish_reason``: ``'stop'`` (a stop word or the model's end marker fired;
    ``stop`` says which), ``'length'`` (``max_new_tokens`` reached),
    ``'cancelled'``. ``token_ids`` are generated ids (never the stop token).
    The last chunk also carries ``prefilled`` (prompt tokens computed this
    turn), ``reused`` (prompt tokens served from the cache) and
    ``cached_from``, where those came from: ``session`` (the session's own
    sequence), ``resident`` (copied from another sequence), ``host`` or
    ``disk`` (restored); ``cache_miss_reason`` says why the engine could not
    reuse all it held: the engine's own reason (a KV file that failed its
    checks), else the delta's (a reset, a drift rewind, an overflow), which
    the session manager adds.
    """

    text: str = ""
    token_ids: tuple[int, ...] = ()
    finish_reason: str | None = None
    stop: str | None = None
    prefilled: int = 0
    reused: int = 0
    cached_from: str | None = None
    cache_miss_reason: str | None = None


@runtime_checkable
class Backend(Protocol):
    """What the REPL and the server need from an inference engine."""

    name: str
    #: which model answers (a file name, a served model); with ``name``, the engine a session belongs to
    model_id: str
    #: a tokenizer sessions should use for token deltas (None: text-only backend)
    tokenizer: Tokenizer | None
    # optional capabilities, each a protocol below: AsyncGenerates, ModelSampling, PrefixCache, Constrains,
    # ModelTemplate, SessionLimit, PromptFormat (test them with isinstance, never getattr)

    def generate(self, request: GenerationRequest) -> Iterator[Chunk]: ...

    def cancel(self, session_id: str) -> None:
        """Stop the generation running for ``session_id`` (the stream ends with 'cancelled')."""

    def drop(self, session_id: str) -> None:
        """Forget the cached state of ``session_id``."""

    def close(self) -> None: ...


@runtime_checkable
class AsyncGenerates(Protocol):
    """A backend that streams to an event loop without blocking it (echo, remote): the session manager then
    runs asyncio callers' turns on the loop, without a thread (see docs/manager.md)."""

    def agenerate(self, request: GenerationRequest) -> AsyncGenerator[Chunk, None]:
        """:meth:`Backend.generate`'s stream as an async generator (closed early when a turn is abandoned)."""


@runtime_checkable
class ModelSampling(Protocol):
    """A backend whose model needs sampling values over its template's (a bundled model's, see bundled.py)."""

    sampling_defaults: Mapping[str, Any]


@runtime_checkable
class PrefixCache(Protocol):
    """A backend that can tell, loading nothing, how much of a prompt its cache would serve (llamacpp)."""

    def cached(self, session_id: str, ids: Sequence[int]) -> tuple[int, str | None]:
        """How many leading ``ids`` the next turn of ``session_id`` would reuse, and from where
        (``session``, ``resident``, ``host``, ``disk``; None when nothing)."""

    def stats(self) -> dict[str, Any]:
        """Every tier's entries, tokens and bytes, prompt tokens by source, misses by reason (the keys of
        ``LlamaCppBackend.stats``; ``/metrics`` exports them)."""

    def awaiting_tools(self, session_id: str) -> None:
        """The answer of ``session_id`` called tools: its client comes back with their results shortly, so
        its KV should be evicted after any other idle session's (a turn calls this when it commits calls)."""

    def rewind(self, session_id: str, start: int, count: int, canonical: Sequence[int]) -> None:
        """The answer of ``session_id`` met retokenization drift under the ``'rewind'`` policy: from
        ``start`` the engine's ``count`` ids are to be ``canonical`` (:attr:`lmchat.Session.drift_rewind`).
        The backend may swap them before the next turn, whose delta discards that range either way."""


@runtime_checkable
class Constrains(Protocol):
    """A backend that enforces a :class:`~lmchat.constraints.Constraint` on its answers (llamacpp; remote, sending it
    as its ``constraints`` option says), so a turn refuses one it would not enforce (:func:`check_constraint`)."""

    def check_constraint(self, constraint: Constraint) -> None:
        """Raise :class:`~lmchat.errors.ConstraintUnsupported` if it cannot enforce ``constraint``."""


@runtime_checkable
class TokenBytes(Protocol):
    """A backend that knows its vocabulary's longest token (llamacpp): an answer of so many characters takes at
    least so many tokens, so a budget too small for a constraint's shortest answer is refused before the turn."""

    @property
    def longest_token(self) -> int:
        """The most bytes one token writes."""


@runtime_checkable
class SpecialTokens(Protocol):
    """A backend whose model's tokenizer has added tokens (llamacpp): a constraint requires a marker among them
    (``[TOOL_CALLS]``, ``<|channel|>``) as that token, as the model was trained to write it."""

    @property
    def special_tokens(self) -> Mapping[str, int]:
        """The added tokens, text -> id."""


def special_tokens(backend: Backend) -> Mapping[str, int] | None:
    """``backend``'s added tokens (:class:`SpecialTokens`), or None: a constraint's markers are then text."""
    return backend.special_tokens if isinstance(backend, SpecialTokens) else None


@runtime_checkable
class ModelTemplate(Protocol):
    """A backend whose model says which chat template it needs (llamacpp, hf: matched from the model's files), so
    the CLI and the server need no ``--template``, and a resumed session moves to it on another engine."""

    @property
    def template_name(self) -> str | None:
        """A registered template's name, for new sessions (the backend never uses it itself; None: no suggestion)."""


@runtime_checkable
class Threaded(Protocol):
    """A backend computing on this machine's CPU with so many threads (llamacpp): on a CPU other work shares,
    fewer threads can decode many times faster, so the REPL and the server say how many."""

    threads: int


@runtime_checkable
class LocalModel(Threaded, Protocol):
    """A backend running a model file in this process (llamacpp), its context shared by so many resident sessions:
    what the CLI's start lines and ``GET /props`` say."""

    path: Path
    ctx: int
    sessions: int


@runtime_checkable
class SessionLimit(Protocol):
    """A backend that holds at most so many tokens per session (llamacpp: its context per sequence): callers give
    sessions a ``session_len`` no larger, so the session's overflow policy acts before the engine would refuse."""

    @property
    def session_len(self) -> int | None:
        """The most tokens one session can hold (None or 0: no limit of the engine's)."""


@runtime_checkable
class PromptFormat(Protocol):
    """A backend that sends prompts upstream as token ids or as text (remote): a text prompt is tokenized again by
    the server, special strings included, so callers refuse messages that hold them when it is text."""

    @property
    def prompt_mode(self) -> str:
        """``'ids'`` or ``'text'``: what requests carry now, without I/O (not settled yet: ``'text'``)."""

    def resolve_prompt_format(self) -> str:
        """:attr:`prompt_mode`, once settled (it may ask the server first, once)."""


def check_constraint(backend: Backend, constraint: Constraint | None) -> None:
    """Refuse, before a turn starts, a constraint its backend would not enforce (never silently ignore it)."""
    if constraint is None:
        return
    if not isinstance(backend, Constrains):
        raise ConstraintUnsupported(f"the {backend.name} backend cannot constrain its answers (JSON, schemas, "
                                    f"grammars): the embedded llama.cpp backend can, and the remote backend told "
                                    f"how its server takes them (its constraints option)", field="response_format")
    backend.check_constraint(constraint)


def answer_budget(backend: Backend, max_tokens: int | None) -> Budget | None:
    """What one answer of ``backend`` can write: ``max_tokens`` (else a session's most) tokens of its vocabulary's
    longest (:class:`TokenBytes`); None where the backend does not know (no bound is then checked)."""
    if not isinstance(backend, TokenBytes):
        return None
    tokens = max_tokens or (backend.session_len if isinstance(backend, SessionLimit) else None)
    return Budget(tokens, backend.longest_token) if tokens else None


def model_sampling(backend: Backend) -> dict[str, Any]:
    """What the backend's model needs over its template's sampling values ({} for most)."""
    return dict(backend.sampling_defaults or {}) if isinstance(backend, ModelSampling) else {}


def engine_id(backend: Backend) -> str:
    """``name:model`` (e.g. ``embedded:SmolLM2-135M-Instruct-Q4_K_M.gguf``): what a stored session belongs to."""
    return f"{backend.name}:{getattr(backend, 'model_id', '') or 'default'}"


def get_backend(name: str, **options: Any) -> Backend:
    """Instantiate a backend by name (``llamacpp`` — alias ``embedded`` —, ``hf``, ``echo``, ``remote``)."""
    name = BACKEND_ALIASES.get(name, name)
    try:
        target = BACKENDS[name]
    except KeyError:
        raise ConfigError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})", field="backend") from None
    backend: Backend = load(target, f"the {name} backend", BACKEND_EXTRAS.get(name))(**options)
    return backend
