"""Saying once that decoding has fallen far below what it was, and what to do about it.

llama.cpp's threads step together: when other work takes a core, every thread waits for the slowest, and a
machine others share can decode many times slower with all its CPUs than with one (issue 39: 1.1 tok/s with the
default threads, 40 tok/s with ``--threads 1``). The REPL compares each answer's speed with the fastest one earlier
in the chat and, the first time one is far below it, says so with the fix.
"""
from __future__ import annotations

from .streaming import Outcome

#: an answer this many times slower than the fastest earlier one has fallen "far below"
SLOWER = 4.0
#: answers shorter than this (tokens, or characters without a tokenizer) are not timed: their speed is noise
MIN_LENGTH = 16


class SpeedWatch:
    """The fastest answer so far (tokens/s, or chars/s), and whether the slowdown was told already."""

    def __init__(self, threads: int | None) -> None:
        self.threads = threads
        self.best = 0.0
        self.told = False

    def note(self, outcome: Outcome) -> str | None:
        """What to say after ``outcome`` (None: nothing)."""
        result = outcome.result
        if outcome.finish_reason == "cancelled" or len(result.token_ids or result.text) < MIN_LENGTH:
            return None
        speed, unit = outcome.speed
        if speed <= 0:
            return None
        if self.best < speed:
            self.best = speed
            return None
        if self.told or speed * SLOWER > self.best:
            return None
        self.told = True
        said = (f"[decoding at {speed:.1f} {unit}, {self.best / speed:.0f}x slower than the {self.best:.1f} {unit} "
                "of an earlier answer: other work is using the CPU")
        if self.threads and self.threads > 1:
            fewer = self.threads // 2
            said += (f"; llama.cpp's {self.threads} threads wait for the slowest of them, and fewer are often much "
                     f"faster on a shared machine: leave and run lmchat chat --resume --threads {fewer}"
                     + (" (or 1)" if fewer > 1 else ""))
        return said + "]"
