"""Generation backends: what turns a session's delta into streamed model output.

The session engine stays backend-agnostic: a backend receives a
:class:`GenerationRequest` (the turn's delta, the ids the engine must hold
afterwards, sampling parameters) and yields :class:`Chunk` s. Backends are
looked up by name with :func:`get_backend`; heavy ones import lazily.
"""
from .base import (
                   AsyncGenerates,
                   Backend,
                   Chunk,
                   Constrains,
                   GenerationRequest,
                   ModelSampling,
                   ModelTemplate,
                   PrefixCache,
                   Prompt,
                   PromptFormat,
                   SamplingParams,
                   SessionLimit,
                   get_backend,
)

__all__ = ["AsyncGenerates", "Backend", "Chunk", "Constrains", "GenerationRequest", "ModelSampling", "ModelTemplate",
           "PrefixCache", "Prompt", "PromptFormat", "SamplingParams", "SessionLimit", "get_backend"]
