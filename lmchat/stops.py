"""Streaming stop words: strings of any length, split across chunks and tokens, and stop ids.

Engines that compare stop words token by token miss a stop string the model
spells with several tokens, and engines that compare each chunk on its own miss
one split between chunks (LMDeploy #1631, #1815). :class:`StopMatcher` runs an
Aho–Corasick automaton over the stream instead: each feed costs
O(chunk + longest stop) and holds back only the longest suffix that could still
grow into a stop word, so nothing of a stop word is ever emitted and nothing
else is delayed longer than needed.

Semantics equal the naive reference: join the whole stream, cut it at the
earliest occurrence of any stop word (at equal starts the longest wins); the
text before the cut is the answer.
"""
from __future__ import annotations

import functools
import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from .errors import ConfigError, SessionError

_REPLACEMENT = "\ufffd"  # what decoders produce for an incomplete UTF-8 sequence


class StopResult(NamedTuple):
    """What one feed releases: ``text`` safe to emit now, and whether (and by which stop) the stream ended."""

    text: str
    stopped: bool
    stop: str | None


#: ``StopResult((text, stopped, stop))`` without the Python-level ``__new__`` of a NamedTuple: once per chunk
_result = functools.partial(tuple.__new__, StopResult)


def _words(value: str | Iterable[str] | None, field: str) -> list[str]:
    if value is None:
        return []
    words = [value] if isinstance(value, str) else list(value)
    for i, w in enumerate(words):
        if not isinstance(w, str):
            raise ConfigError(f"stop words must be strings, got {type(w).__name__} at [{i}]", field=field)
        if not w:
            raise ConfigError(f"empty stop word at [{i}]: it would stop before any text", field=field)
    return words


def combine_stops(template_stop_words: Iterable[str] | None,
                  request_stop: str | Iterable[str] | None) -> tuple[str, ...]:
    """The template's stop words followed by the request's, without duplicates, in first-seen order."""
    words = _words(template_stop_words, "stop_words") + _words(request_stop, "stop")
    return tuple(dict.fromkeys(words))


class _Automaton:
    """Aho–Corasick trie of the stop words, with per-state facts precomputed for the stream scan."""

    def __init__(self, words: Sequence[str]):
        self.goto: list[dict[str, int]] = [{}]
        self.depth = [0]
        word_at: list[str | None] = [None]
        for w in words:
            s = 0
            for ch in w:
                if ch not in self.goto[s]:
                    self.goto.append({})
                    self.depth.append(self.depth[s] + 1)
                    word_at.append(None)
                    self.goto[s][ch] = len(self.goto) - 1
                s = self.goto[s][ch]
            word_at[s] = w
        n = len(self.goto)
        self.fail = [0] * n
        # match[s]: longest stop word ending here (the earliest-starting one at this end)
        self.match: list[str | None] = [None] * n
        # hold[s]: length of the longest suffix that is a proper prefix of a stop word, i.e. could still grow
        self.hold = [0] * n
        queue = deque([0])
        while queue:  # breadth first, so fail targets (shallower) are complete before they are read
            s = queue.popleft()
            f = self.fail[s]
            self.match[s] = word_at[s] or self.match[f]
            self.hold[s] = self.depth[s] if self.goto[s] else self.hold[f]
            for ch, t in self.goto[s].items():
                self.fail[t] = self.step(f, ch) if s else 0
                queue.append(t)
        # from the root, a character that starts no stop word leads back to the root: the scan skips such
        # runs (most of an answer) with one search in C instead of a step per character
        firsts = "".join(re.escape(ch) for ch in self.goto[0])
        self.first = re.compile(f"[{firsts}]" if firsts else "(?!)")  # no stop words: nothing to jump to

    def step(self, s: int, ch: str) -> int:
        while s and ch not in self.goto[s]:
            s = self.fail[s]
        return self.goto[s].get(ch, 0)


@functools.lru_cache(maxsize=256)
def _automaton(stops: tuple[str, ...]) -> _Automaton:
    """Read-only once built, so matchers share it: every turn of a server builds a matcher for the same
    few stop sets, and building one cost a fifth of an echo turn."""
    return _Automaton(stops)


class StopMatcher:
    """Cut a streamed answer at its first stop word; text with :meth:`feed`, token ids with :meth:`feed_ids`.

    ``stops`` are stop strings of any length; ``stop_ids`` are token ids (such as
    ``<|im_end|>``'s) that end the stream as soon as they are generated. Use one
    matcher per answer, and either :meth:`feed` or :meth:`feed_ids` for it.
    """

    def __init__(self, stops: Iterable[str], *, stop_ids: Iterable[int] = ()):
        self.stops = tuple(dict.fromkeys(_words(stops, "stops")))
        self.stop_ids = frozenset(int(i) for i in stop_ids)
        self._ac = _automaton(self.stops)
        self._state = 0
        self._pos = 0  # characters consumed
        self._emitted = 0  # characters released; the held-back text starts here
        self._pending = ""
        self._candidate: tuple[int, str] | None = None  # a stop found, not yet known to be the earliest
        self._done = False
        self.stopped = False
        self.stop: str | None = None
        # token mode: an id is kept once all of its text has been released
        self._kept: list[int] = []
        self._groups: deque[tuple[list[int], int]] = deque()  # (ids, end of their text) not yet released
        self._prefix: list[int] = []  # the last decoded ids: context so the next ones decode as mid-text
        self._unread: list[int] = []  # ids whose text is not complete yet (partial UTF-8)
        self._decode: Callable[[list[int]], str] | None = None

    # ------------------------------------------------------------------ text
    def feed(self, chunk: str) -> StopResult:
        """Scan the next piece of the stream; returns the text that can no longer be part of a stop word."""
        return _result((self._scan(chunk) if self._open() else "", self.stopped, self.stop))

    def finish(self) -> str:
        """End the stream: release the held-back text (up to a stop word still awaiting confirmation)."""
        if self._done:
            return ""
        text = self._scan(self._flush_decoder()) if self._unread else ""
        return text if self._done else text + self._end()  # the flushed text may hold a stop word

    @property
    def held(self) -> str:
        """Text consumed but not released yet: it may be the start of a stop word."""
        return self._pending

    def _open(self) -> bool:
        """False once a stop fired (later text is discarded); feeding after finish() is a caller bug."""
        if self._done and not self.stopped:
            raise SessionError("feed after finish(): the stream has ended")
        return not self._done

    def _scan(self, chunk: str) -> str:
        ac, state, cand = self._ac, self._state, self._candidate
        base = self._emitted
        buf = self._pending + chunk
        end = self._pos
        i, n = 0, len(chunk)
        while i < n:
            if state == 0 and cand is None:  # at the root with nothing found: jump to a stop word's first character
                found = ac.first.search(chunk, i)
                skip = (found.start() if found is not None else n) - i
                end += skip
                i += skip
                if i == n:
                    break
            ch = chunk[i]
            i += 1
            state = ac.step(state, ch)
            end += 1
            word = ac.match[state]
            if word is not None:
                start = end - len(word)
                if cand is None or start < cand[0] or (start == cand[0] and len(word) > len(cand[1])):
                    cand = (start, word)
            # every stop word still in progress starts at end - hold: past the candidate, none can beat it
            if cand is not None and end - ac.hold[state] > cand[0]:
                self._candidate = cand
                return self._fire(buf[: cand[0] - base])
        self._state, self._pos, self._candidate = state, end, cand
        safe = end - ac.hold[state]
        if cand is not None:
            safe = min(safe, cand[0])
        return self._release(buf, safe - base)

    def _release(self, buf: str, n: int) -> str:
        self._pending = buf[n:]
        self._emitted += n
        self._release_ids()
        return buf[:n]

    def _fire(self, text: str) -> str:
        assert self._candidate is not None  # both callers found one
        start, self.stop = self._candidate
        self.stopped = True
        self._emitted = start
        self._pending = ""
        return self._close(text)

    def _end(self) -> str:
        if self._candidate is not None:
            start, _ = self._candidate
            return self._fire(self._pending[: start - self._emitted])
        text = self._release(self._pending, len(self._pending))
        return self._close(text)

    def _close(self, text: str) -> str:
        self._done = True
        self._release_ids()
        self._groups.clear()  # ids whose text reaches into the stop word, or follows it
        self._unread = []
        return text

    # ------------------------------------------------------------------ token ids
    def feed_ids(self, ids: Iterable[int], decode: Callable[[list[int]], str]) -> StopResult:
        """Scan newly generated token ids; ``decode`` turns ids into text (keep special tokens, e.g. ``codec.decode``).

        A stop id ends the stream at once; stop strings are matched on the
        decoded text, across tokens. Text of ids that end inside a UTF-8
        character is held until a later id completes it. :attr:`kept_ids`
        collects the ids whose text has been released.
        """
        self._decode = decode
        out = []
        for tok in ids:
            if not self._open():
                break
            tok = int(tok)
            if tok in self.stop_ids:
                out.append(self.finish())
                if not self.stopped:  # no stop string ended before this id
                    self.stopped, self.stop = True, decode([tok])
                break
            self._unread.append(tok)
            prefix_text = decode(self._prefix) if self._prefix else ""
            text = decode(self._prefix + self._unread)
            # vLLM's incremental detokenisation: wait while the text is not longer or ends mid-character
            if len(text) > len(prefix_text) and not text.endswith(_REPLACEMENT):
                out.append(self._scan_group(text[len(prefix_text):]))
        return _result(("".join(out), self.stopped, self.stop))

    @property
    def kept_ids(self) -> list[int]:
        """Ids released so far: at the end, the generated ids before the stop, to commit verbatim.

        When a stop string starts inside a token, that token is not kept (its
        text runs into the stop word), so ``decode(kept_ids)`` is then a prefix
        of the answer text rather than all of it.
        """
        return list(self._kept)

    def _scan_group(self, text: str) -> str:
        self._groups.append((self._unread, self._pos + len(text)))
        self._prefix, self._unread = self._unread, []
        return self._scan(text)

    def _flush_decoder(self) -> str:
        # the stream ends here: what is left decodes as is, replacement characters included
        decode = self._decode
        assert decode is not None  # ids are unread only after feed_ids, which sets it
        prefix_text = decode(self._prefix) if self._prefix else ""
        text = decode(self._prefix + self._unread)[len(prefix_text):]
        self._groups.append((self._unread, self._pos + len(text)))
        self._unread = []
        return text

    def _release_ids(self) -> None:
        groups = self._groups
        while groups and groups[0][1] <= self._emitted:
            self._kept += groups.popleft()[0]
