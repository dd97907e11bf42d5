"""Responses' ``reasoning.effort`` on gpt-oss: the level its template renders (``Reasoning: high``), not only on or
off. Before, the effort was read as on/off only, and gpt-oss answered at its template's default, medium."""
from __future__ import annotations

import pytest

pytest.importorskip("openai")
pytest.importorskip("fastapi")

from lmchat.serve.chains import effort_level  # noqa: E402

from .serve_helpers import InProcess  # noqa: E402


@pytest.fixture(scope="module")
def gpt_oss():
    s = InProcess("--template", "gpt-oss", "--store", "memory", "--backend-option", "prefix=")
    yield s
    s.stop()


def held(server, response_id: str) -> str:
    """The prompt the session of a response holds (the manager's own record of it)."""
    from lmchat.serve.chains import _parsed

    sid, _ = _parsed(response_id)
    return server.http.app.state.manager.get(sid).context


def test_the_effort_is_the_level_the_template_renders(gpt_oss):
    client = gpt_oss.openai()
    high = client.responses.create(model="m", input="Hi.", reasoning={"effort": "high"})
    assert "Reasoning: high" in held(gpt_oss, high.id) and high.reasoning.effort == "high"
    low = client.responses.create(model="m", input="Again.", previous_response_id=high.id,
                                  reasoning={"effort": "minimal"})
    assert "Reasoning: low" in held(gpt_oss, low.id)
    assert low.usage.input_tokens_details.cache_miss_reason == "the reasoning setting changed"
    default = client.responses.create(model="m", input="Hi.")
    assert "Reasoning: medium" in held(gpt_oss, default.id)  # the template's own default
    with pytest.raises(Exception) as refused:  # gpt-oss always reasons: no switch turns it off
        client.responses.create(model="m", input="Hi.", reasoning={"effort": "none"})
    assert refused.value.status_code == 400 and refused.value.body["param"] == "reasoning.effort"


def test_openai_efforts_map_to_the_nearest_level():
    levels = ("low", "medium", "high")
    assert [effort_level(e, levels) for e in ("minimal", "low", "medium", "high", "xhigh")] == \
        ["low", "low", "medium", "high", "high"]
