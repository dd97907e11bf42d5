"""Seeded random conversations for the golden vectors.

The kinds of text ``tests/conversations.py`` lets hypothesis draw (the tricky
battery strings, arbitrary unicode, a small alphabet of markup characters) plus
special-token-like strings and edge whitespace, drawn from ``random.Random(seed)``
so that every run, on every machine, draws the same conversations. Only
``Random.random()`` is used: Python keeps its sequence for a given seed across
versions (the other methods may change).
"""
from __future__ import annotations

import random

from lmchat.interop.battery import TOOLS, TRICKY, call

WORDS = TRICKY + ["ok", "Paris", "<think>\nhmm\n</think>\n\nyes", "a</think>b"]
ALPHABET = list(" \n\tab中😀<|>/")
#: markers of the catalogue's families, as a user might type them
MARKUP = [
    "<|im_start|>", "<|im_end|>", "<s>", "</s>", "[INST]", "[/INST]", "<<SYS>>", "<|begin_of_text|>", "<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>", "<start_of_turn>", "<end_of_turn>", "<bos>", "<｜User｜>",
    "<｜Assistant｜>", "<｜end▁of▁sentence｜>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>",
    "<think>", "</think>", "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|observation|>", "[gMASK]sop", "### User:",
    "GPT4 Correct User:", "<|end_of_text|>", "{{ messages }}", "{% if true %}x{% endif %}",
]
EDGES = ["", "", " ", "  ", "\n", "\n\n", "\t", " \n", "\u3000"]
#: code point ranges: ASCII, controls, Latin, combining marks, general punctuation (zero-width, bidi,
#: line separators), CJK, emoji, then anything (surrogates excepted)
RANGES = [(0x20, 0x7E), (0x20, 0x7E), (0x00, 0x1F), (0xA0, 0x24F), (0x300, 0x36F), (0x2000, 0x206F),
          (0x4E00, 0x9FFF), (0x1F300, 0x1FAFF), (0x0, 0x10FFFF)]


class Draw:
    """Draws from one seeded generator."""

    def __init__(self, seed: str):
        self.rng = random.Random(seed)

    def below(self, n: int) -> int:
        return min(int(self.rng.random() * n), n - 1)

    def pick(self, items):
        return items[self.below(len(items))]

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def char(self) -> str:
        lo, hi = self.pick(RANGES)
        while True:
            code = lo + self.below(hi - lo + 1)
            if not 0xD800 <= code <= 0xDFFF:
                return chr(code)

    def text(self) -> str:
        kind = self.below(5)
        if kind == 0:
            return self.pick(WORDS)
        if kind == 1:
            return "".join(self.char() for _ in range(self.below(17)))
        if kind == 2:
            return "".join(self.pick(ALPHABET) for _ in range(self.below(13)))
        if kind == 3:
            return "".join(self.pick(MARKUP + WORDS) for _ in range(1 + self.below(3)))
        return self.pick(EDGES) + self.pick(["x", "ok", "中文", self.pick(MARKUP)]) + self.pick(EDGES)

    def conversation(self, roles=("system", "user", "assistant"), max_messages=7) -> list[dict]:
        """Like ``conversations()`` in tests/conversations.py: any roles in any order."""
        return [{"role": self.pick(roles), "content": self.text()} for _ in range(1 + self.below(max_messages))]

    def tool_conversation(self, max_messages=7) -> list[dict]:
        """Any roles, tool results and calls too (string or mapping arguments); content sometimes missing."""
        out = []
        for k in range(1 + self.below(max_messages)):
            role = self.pick(["system", "user", "user", "assistant", "assistant", "tool"])
            message = {"role": role}
            if self.below(10):
                message["content"] = self.text()
            if role == "assistant" and self.chance(0.5):
                name = self.pick([f["function"]["name"] for f in TOOLS])
                arguments = self.pick(['{"a": 1}', {"a": 1, "b": 2}, {"location": "上海"}, "{}"])
                message["tool_calls"] = [call(name, arguments, f"call_{k}")]
            if role == "tool":
                message["tool_call_id"] = f"call_{max(k - 1, 0)}"
                if self.chance(0.5):
                    message["name"] = self.pick([f["function"]["name"] for f in TOOLS])
            out.append(message)
        return out
