"""A runaway-repetition stop: an answer whose end has become one short piece repeated over and over.

Small models at low temperature can fall into a loop ("la femme au roi, la
femme au roi, ...") and generate it until ``max_new_tokens``. The guard looks
at the end of the answer: when the last ``window`` characters are periodic
with a period of at most ``max_period`` characters (so the piece repeats at
least ``window / max_period`` times), the answer is stopped with the finish
reason ``'repetition'``. The period is found in O(window) with the prefix
function (the shortest period of a string is its length minus its longest
proper border), and checked at most once every ``every`` new characters.
"""
from __future__ import annotations

#: defaults: a loop of up to 64 characters repeated over 384 (6 repeats or more)
WINDOW = 384
MAX_PERIOD = 64


class RepetitionGuard:
    """Feed the answer's text as it streams; :attr:`tripped` turns true once it loops."""

    def __init__(self, window: int = WINDOW, max_period: int = MAX_PERIOD, every: int = 16):
        if not 0 < max_period < window:
            raise ValueError(f"need 0 < max_period < window, got {max_period} and {window}")
        self.window, self.max_period, self.every = window, max_period, every
        self.tripped = False
        self.period: int | None = None
        self._tail = ""
        self._since = 0

    def feed(self, text: str) -> bool:
        """Add ``text``; True once the answer has run into a loop."""
        if self.tripped or not text:
            return self.tripped
        self._tail = (self._tail + text)[-self.window:]
        self._since += len(text)
        if len(self._tail) == self.window and self._since >= self.every:
            self._since = 0
            period = shortest_period(self._tail)
            if period <= self.max_period:
                self.tripped, self.period = True, period
        return self.tripped


def shortest_period(s: str) -> int:
    """The smallest ``p`` such that ``s[i] == s[i + p]`` for every ``i`` (``len(s)`` if none is shorter)."""
    border = [0] * len(s)
    k = 0
    for i in range(1, len(s)):
        while k and s[i] != s[k]:
            k = border[k - 1]
        if s[i] == s[k]:
            k += 1
        border[i] = k
    return len(s) - (border[-1] if s else 0)
