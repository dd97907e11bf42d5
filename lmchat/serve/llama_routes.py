"""llama-server's inspection routes, for the clients and habits that expect them: ``GET /props`` (what is served,
with its default sampling), ``POST /tokenize`` and ``POST /detokenize`` (the served model's vocabulary).

The bodies are llama-server's (``content``, ``with_pieces``, ``tokens``), so its clients work unchanged. Token ids
are the served model's: a backend without the model's tokenizer (echo, remote without ``--tokenizer``) answers
400 on the two vocabulary routes, where the session counts characters.
"""
from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field, StrictBool, StrictInt, StrictStr

from ..backends.base import LocalModel
from ..manager import SessionManager
from ..session.tokens import TokenCodec, codec_for
from .deps import owner
from .errors import ApiError
from .schemas import MAX_TOKENS, _Body

router = APIRouter()

#: the most ids one request may tokenize or detokenize (a whole long context, several times over)
MAX_IDS = MAX_TOKENS


class GenerationSettings(BaseModel):
    """What a turn samples with when its request gives no value: the template's, the model's, the command line's."""

    n_ctx: int | None = Field(description="the most a session may hold (tokens; characters without a tokenizer)")
    temperature: float
    top_p: float
    top_k: int | None
    repetition_penalty: float
    max_new_tokens: int
    stop: list[str]


class Props(BaseModel):
    """``GET /props``: the served model and how it answers by default."""

    model: str = Field(description="the name /v1/models lists and requests may give")
    model_path: str | None = Field(description="the GGUF file, when the model runs in this process")
    template: str = Field(description="the chat template new sessions render with")
    total_slots: int | None = Field(description="sessions the engine holds resident at once (llamacpp)")
    threads: int | None = Field(description="the engine's CPU threads (llamacpp)")
    default_generation_settings: GenerationSettings


class TokenizeRequest(_Body):
    """``POST /tokenize``: ``content`` as the model reads it in a prompt, its special strings (``<|im_start|>``) read
    as their tokens, as llama-server's ``parse_special`` default does."""

    content: StrictStr = Field(max_length=10 * MAX_IDS)
    with_pieces: StrictBool = False


class Piece(BaseModel):
    id: int
    piece: str


class Tokens(BaseModel):
    tokens: list[int] | list[Piece]


class DetokenizeRequest(_Body):
    tokens: list[StrictInt] = Field(max_length=MAX_IDS)


class Content(BaseModel):
    content: str


@router.get("/props", response_model=Props)
async def props(request: Request, who: str | None = Depends(owner)) -> Props:
    state = request.app.state
    mgr: SessionManager = state.manager
    backend = mgr.backend
    params = mgr.default_sampling()
    path, slots, threads = ((str(backend.path), backend.sessions, backend.threads) if isinstance(backend, LocalModel)
                            else (None, None, None))
    return Props(
        model=state.model_name, model_path=path, template=mgr.default_template.name, total_slots=slots,
        threads=threads,
        default_generation_settings=GenerationSettings(
            n_ctx=mgr.session_len, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
            repetition_penalty=params.repetition_penalty, max_new_tokens=params.max_new_tokens,
            stop=list(params.stop)))


@router.post("/tokenize", response_model=Tokens)
async def tokenize(body: TokenizeRequest, request: Request, who: str | None = Depends(owner)) -> Tokens:
    codec = _codec(request.app.state.manager)
    ids, _ = codec.encode(body.content, codec.special_spans(body.content))
    if not body.with_pieces:
        return Tokens(tokens=ids)
    return Tokens(tokens=[Piece(id=i, piece=codec.decode([i])) for i in ids])


@router.post("/detokenize", response_model=Content)
async def detokenize(body: DetokenizeRequest, request: Request, who: str | None = Depends(owner)) -> Content:
    codec = _codec(request.app.state.manager)
    size = codec.vocab.n_tokens
    bad = next((k for k, i in enumerate(body.tokens) if not 0 <= i < size), None)
    if bad is not None:
        raise ApiError(400, f"tokens[{bad}] = {body.tokens[bad]} is not a token id of this model (0 to {size - 1})",
                       param=f"tokens[{bad}]", code="invalid_value")
    return Content(content=codec.decode(body.tokens))


def _codec(mgr: SessionManager) -> TokenCodec:
    tokenizer = mgr.tokenizer
    if tokenizer is None:
        raise ApiError(400, f"the {mgr.backend.name} backend has no tokenizer of the model (--tokenizer PATH gives "
                            "one): its sessions count characters", code="unsupported_value")
    return codec_for(tokenizer)
