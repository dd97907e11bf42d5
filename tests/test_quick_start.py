"""The README's quick start as a new user reads it (issue 39, item 10): two commands that keep their venvs apart,
then a short list of what to do next, the details left to docs/getting-started.md."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_quick_start_is_short_and_its_commands_keep_their_venvs_apart():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    # one venv each: following both must not put the test extra's torch into the chat's venv
    assert re.findall(r"python3 -m venv (\S+) && \. (\S+)/bin/activate", commands) == [
        (".venv", ".venv"), (".venv-test", ".venv-test")]
    after = readme.split("```", 2)[2].lstrip("\n")
    notes = [line for line in after.splitlines()[:40] if line.startswith(">")]
    assert len(notes) <= 16, "\n".join(notes)  # was 31 lines of extras, package counts and lint details
    text = " ".join(notes)
    for thing in ("lmchat chat \"question\"", "--threads 1", "lmchat models", "lmchat cache clear", "lmchat serve",
                  "getting-started.md"):
        assert thing in text, thing
    started = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    assert "python3 -m venv .venv-test" in started and "What the first line installs" in started
    assert "python3 -m venv .venv-test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")  # CI does as it says
