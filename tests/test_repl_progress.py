"""`lmchat chat` in a pseudo-terminal while the engine reads a long prompt (issue 39, item 2): the screen says how
far it is, where it stayed blank until the answer's first token."""
from __future__ import annotations

import re

from .test_repl_terminal import _bundled_terminal, _until

#: about 620 tokens of the bundled model's vocabulary: two of the engine's 512-id batches, so the engine reports
#: between them (its length is not what is tested: a part read, then more, before the answer)
PASTE = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(40))
PROGRESS = re.compile(r"reading the prompt: ([\d,]+)/([\d,]+) tokens")


def _progress(lines: list[str]) -> list[tuple[int, int]]:
    return [(int(m[1].replace(",", "")), int(m[2].replace(",", ""))) for line in lines
            if (m := PROGRESS.search(line))]


def test_a_long_paste_shows_how_much_of_the_prompt_is_read(tmp_path):
    child, screen, stream = _bundled_terminal(tmp_path, "--ctx", "2048")
    try:
        _until(child, screen, stream, lambda ls: "tokens │" in ls[-1])
        child.send("/set max_new_tokens 4\r")
        _until(child, screen, stream, lambda ls: "max_new_tokens = 4" in "\n".join(ls))
        child.send("\x1b[200~" + PASTE + "\x1b[201~\r")  # a bracketed paste, as a terminal sends one
        seen: list[tuple[int, int]] = []

        def reading(lines: list[str]) -> bool:
            seen.extend(_progress(lines))
            return "last turn" in lines[-1]  # the answer came and the toolbar is back

        lines = _until(child, screen, stream, reading, seconds=180)
    finally:
        child.close(force=True)
    assert "last turn" in lines[-1], "\n".join(lines)
    assert seen, "nothing was shown while the prompt was read"
    totals = {total for _, total in seen}
    assert len(totals) == 1 and min(totals) > 512, seen  # the whole prompt (more than one batch), counted once
    assert any(done < total for done, total in seen), seen  # shown before the end ...
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)  # ... and counting up
    assert not _progress(lines), "\n".join(lines)  # the answer replaced it
