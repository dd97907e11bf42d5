"""What an inference server's prefix cache saves across the turns of a remote session.

The remote backend sends the whole conversation every turn (the server is stateless per request);
the server's prefix cache is what spares it re-evaluating the history. One multi-turn conversation
(greedy, short answers) runs twice through :class:`lmchat.backends.remote.RemoteBackend`:

* **reuse**: the session alone on the server, which evaluates only what its cache lacks;
* **defeated**: the same conversation (the reuse run's answers replayed), the cache defeated before
  every turn: ``interleave`` (default) sends another client's one-token request first, which takes
  llama-cpp-python's only cache; ``cache_prompt`` sends llama.cpp's ``cache_prompt: false``
  (llama-server); ``salt`` a fresh vLLM ``cache_salt`` per request.

Turn 1 starts on a cold cache in both. Per turn: the prompt's tokens, the tokens the server
evaluated and reused, and the time to first token (the first streamed piece: prefill plus one
token; medians of ``--repeat`` runs). The counts come from the server: its ``timings``/``usage``
when it reports them (llama-server, vLLM with ``--enable-prompt-tokens-details``, SGLang with
``--enable-cache-report``), else, for the llama-cpp-python server this benchmark starts by default
(``python -m llama_cpp.server`` on the bundled GGUF, one thread), its log line ``Llama.generate: N
prefix-match hit, remaining M prompt tokens to eval``; no such line means it evaluated the whole prompt.
"""
from __future__ import annotations

import argparse
import statistics
import time
import uuid

import attrs

from lmchat import Session
from lmchat.backends import GenerationRequest, Prompt, SamplingParams
from lmchat.backends.remote import RemoteBackend

from .common import save, table

SYSTEM = ("You are a concise assistant. Answer every question in one short sentence, without lists, "
          "code or preamble, and never repeat the question.")
OTHER = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt."


def question(i: int) -> str:
    return f"Question {i}: tell me one interesting fact about the number {i}, in one sentence."


class Run:
    """One pass over the conversation against ``backend``; ``upstream`` (ours) gives its log."""

    def __init__(self, backend: RemoteBackend, upstream, defeat: str | None, params: SamplingParams):
        self.backend, self.upstream, self.defeat, self.params = backend, upstream, defeat, params

    def cold(self) -> None:
        """Another client's request on an unrelated prompt: the cache no longer holds our session."""
        if self.defeat in ("cache_prompt", "salt") and self.upstream is None:
            return  # every request of this run is uncached anyway
        other = Session("smollm2")
        # a raw prompt sharing no prefix with the conversation (not even the template's first marker)
        request = GenerationRequest(session_id="bench-other", delta=other.prompt(OTHER), source=lambda: Prompt(OTHER),
                                    params=attrs.evolve(self.params, max_new_tokens=1))
        list(self.backend.generate(request))

    def turn(self, session: Session, delta, max_new_tokens: int) -> dict:
        if self.defeat == "interleave":
            self.cold()
        if self.defeat == "salt":
            self.backend.extra_body["cache_salt"] = uuid.uuid4().hex
        request = GenerationRequest.from_session(session, delta,
                                                 attrs.evolve(self.params, max_new_tokens=max_new_tokens))
        mark = self.upstream.mark() if self.upstream else 0
        started = time.perf_counter()
        first, chunks = None, []
        for chunk in self.backend.generate(request):
            if first is None:
                first = time.perf_counter() - started
            chunks.append(chunk)
        prompt = len(session.context_ids) if session.context_ids is not None else None
        row = {"ttft_s": first, "prompt_tokens": prompt, "text": "".join(c.text for c in chunks),
               "stop": chunks[-1].stop}
        last = chunks[-1]
        if last.prefilled or last.reused:
            row.update(evaluated=last.prefilled, reused=last.reused, source="server counts")
        elif self.upstream is not None:
            hits = self.upstream.reuse(mark)
            reused, evaluated = hits[-1] if hits else (0, prompt)
            row.update(evaluated=evaluated, reused=reused, source="server log")
        return row


def conversation(run: Run, turns: int, tokenizer, answers: list | None, answer_tokens: int) -> tuple[list, list]:
    """Rows per turn and the answers given (``answers``: replay these instead of the generated ones)."""
    session = Session("smollm2", system=SYSTEM, tokenizer=tokenizer)
    run.cold()
    rows, given = [], []
    for t in range(1, turns + 1):
        delta = session.prompt(question(t))
        row = run.turn(session, delta, 1 if answers else answer_tokens)
        text, stop = answers[t - 1] if answers else (row["text"], row["stop"])
        session.commit(text, stop=stop)
        rows.append(row)
        given.append((text, stop))
    return rows, given


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench remote", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", type=int, default=12)
    p.add_argument("--repeat", type=int, default=3, help="runs per mode (medians of TTFT are shown)")
    p.add_argument("--answer-tokens", type=int, default=24)
    p.add_argument("--threads", type=int, default=1, help="threads of the llama-cpp-python server started here")
    p.add_argument("--base-url", help="an OpenAI-compatible server of SmolLM2-135M-Instruct to measure instead")
    p.add_argument("--model", default=None, help="the model name to send (--base-url)")
    p.add_argument("--defeat", choices=["interleave", "cache_prompt", "salt"], default="interleave",
                   help="how the defeated run defeats the cache (default: interleave)")
    args = p.parse_args(argv)

    from lmchat.backends.bundled import default_gguf
    from lmchat.backends.llamacpp._lib import load_model
    from lmchat.backends.llamacpp.vocab import LlamaVocab

    vocab = LlamaVocab(load_model(default_gguf()))  # SmolLM2's: sessions count the prompt's tokens
    upstream = None
    if args.base_url is None:
        from tests.remote_upstream import Upstream  # the tests' launcher of the same server

        upstream = Upstream(threads=args.threads, n_ctx=4096)
    url = args.base_url or upstream.url
    params = SamplingParams(temperature=0, top_p=1.0, stop=("<|im_end|>", "<|endoftext|>"))
    try:
        # text prompts: llama-cpp-python takes nothing else, and servers hash and cache both alike
        reuse_backend = RemoteBackend(url, model=args.model, tokenizer=vocab, prompt_format="text")
        extra = {"cache_prompt": False} if args.defeat == "cache_prompt" else {}
        defeat_backend = RemoteBackend(url, model=args.model, tokenizer=vocab, prompt_format="text", extra_body=extra)
        reuse, defeated, answers = [], [], None
        Run(reuse_backend, upstream, None, params).cold()  # warm-up: the server's first request allocates
        for _ in range(args.repeat):
            rows, answers = conversation(Run(reuse_backend, upstream, None, params), args.turns, vocab, None,
                                         args.answer_tokens)
            reuse.append(rows)
            rows, _ = conversation(Run(defeat_backend, upstream, args.defeat, params), args.turns, vocab, answers,
                                   args.answer_tokens)
            defeated.append(rows)
    finally:
        if upstream is not None:
            upstream.stop()

    def med(runs, t):
        return statistics.median(r[t]["ttft_s"] for r in runs)

    records, rows = [], []
    for t in range(args.turns):
        ours, theirs = reuse[0][t], defeated[0][t]
        a, b = med(reuse, t), med(defeated, t)
        records.append({"turn": t + 1, "prompt_tokens": ours["prompt_tokens"], "evaluated_reuse": ours.get("evaluated"),
                        "reused_reuse": ours.get("reused"), "ttft_reuse_s": a,
                        "evaluated_defeated": theirs.get("evaluated"), "reused_defeated": theirs.get("reused"),
                        "ttft_defeated_s": b})
        rows.append([t + 1, ours["prompt_tokens"], ours.get("evaluated", "?"), ours.get("reused", "?"),
                     f"{a * 1e3:.0f} ms", theirs.get("evaluated", "?"), f"{b * 1e3:.0f} ms", f"{b / a:.1f}x"])
    source = reuse[0][-1].get("source", "none")
    server = args.base_url or f"llama-cpp-python {_version()} server, --n_threads {args.threads}, bundled GGUF"
    print(f"{server}; prompts as text; {args.turns} turns, greedy answers <= {args.answer_tokens} tokens; "
          f"cache defeated by: {args.defeat}; counts from the {source}; TTFT medians of {args.repeat}\n")
    print(table(["turn", "prompt tokens", "evaluated (reuse)", "reused (reuse)", "TTFT reuse",
                 "evaluated (defeated)", "TTFT defeated", "defeated / reuse"], rows))
    totals = {k: sum(r[k] or 0 for r in records) for k in ("evaluated_reuse", "evaluated_defeated")}
    ttft = {k: sum(r[k] for r in records) for k in ("ttft_reuse_s", "ttft_defeated_s")}
    print(f"\nover {args.turns} turns: the server evaluated {totals['evaluated_reuse']} prompt tokens with its cache, "
          f"{totals['evaluated_defeated']} without "
          f"({totals['evaluated_defeated'] / max(totals['evaluated_reuse'], 1):.1f}x); "
          f"time to first token summed {ttft['ttft_reuse_s']:.1f} s vs {ttft['ttft_defeated_s']:.1f} s "
          f"({ttft['ttft_defeated_s'] / ttft['ttft_reuse_s']:.1f}x)")
    payload = {"server": server, "defeat": args.defeat, "threads": args.threads, "repeat": args.repeat,
               "answer_tokens": args.answer_tokens, "counts_from": source, "rows": records,
               "totals": {**totals, **ttft}}
    print(f"results: {save('remote', payload)}")
    return 0


def _version() -> str:
    try:
        import llama_cpp

        return llama_cpp.__version__
    except (ImportError, AttributeError):
        return "?"
