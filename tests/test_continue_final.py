"""``continue_final_message``: byte-exact with transformers on every official template; sessions reopen answers."""
from __future__ import annotations

import pytest

import lmchat
from lmchat import get_template
from lmchat.registry import template_class

from .test_conformance import assert_same

OFFICIAL = sorted(n for n in lmchat.template_names() if template_class(n).official)
OPEN_ANSWERS = {
    "plain": [{"role": "user", "content": "What is the capital of France?"},
              {"role": "assistant", "content": "The capital of France is"}],
    "system": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
               {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Count to 3."},
               {"role": "assistant", "content": "1, 2,"}],
    "trailing space": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Well, "}],
    "unicode": [{"role": "user", "content": "你好"}, {"role": "assistant", "content": "你好！我是"}],
}


#: the official renderings these tests compare with (tests/golden)
GOLDEN = [(name, messages, {"add_generation_prompt": False, "continue_final_message": True})
          for name in OFFICIAL for messages in OPEN_ANSWERS.values()]


@pytest.mark.parametrize("name", OFFICIAL)
def test_continue_final_message_matches_transformers(name):
    for label, messages in OPEN_ANSWERS.items():
        try:
            assert_same(name, messages, add_generation_prompt=False, continue_final_message=True)
        except AssertionError as exc:
            raise AssertionError(f"{label}: {exc}") from exc


def test_continue_final_message_excludes_the_generation_prompt():
    t = get_template("qwen2.5")
    with pytest.raises(lmchat.TemplateConfigError, match="not compatible"):
        t.messages2prompt(OPEN_ANSWERS["plain"], add_generation_prompt=True, continue_final_message=True)
    assert t.messages2prompt(OPEN_ANSWERS["plain"], continue_final_message=True).endswith(
        "<|im_start|>assistant\nThe capital of France is")
