"""The backend options ``lmchat chat`` and ``lmchat serve`` share, spelled the same in both."""
from __future__ import annotations

import json

from ..backends.base import BACKEND_ALIASES, BACKENDS
from .main import UsageError

DEFAULT = "llamacpp"


def add_backend_arguments(p) -> None:
    p.add_argument("--backend", choices=[*BACKENDS, *BACKEND_ALIASES], default=DEFAULT,
                   help="what generates the answers (default: llamacpp, the bundled SmolLM2 or --model, offline; "
                        "'embedded' is the same; hf: transformers and torch, for model folders)")
    p.add_argument("--model", metavar="PATH",
                   help="llamacpp: any .gguf file instead of the bundled model; hf: a model folder or .gguf")
    engine = p.add_argument_group("llamacpp backend (docs/backends.md)")
    engine.add_argument("--threads", type=int, metavar="N", help="llama.cpp threads (default: the CPUs available)")
    engine.add_argument("--ctx", type=int, metavar="TOKENS",
                        help="KV cache over all resident sessions (default: --sessions x min(4096, the model's))")
    engine.add_argument("--sessions", type=int, metavar="N",
                        help="sessions whose KV stays in llama.cpp at once (default: 4); others wait in host memory")
    remote = p.add_argument_group("remote backend (an OpenAI-compatible completions server)")
    remote.add_argument("--base-url", metavar="URL")
    # `lmchat chat` once spelled these --api-key/--model-name: still accepted there
    remote.add_argument("--remote-api-key", dest="remote_api_key", metavar="KEY", help="the server's API key")
    remote.add_argument("--remote-model", dest="remote_model", metavar="NAME", help="the model name to send")
    p.add_argument("--backend-option", action="append", default=[], metavar="KEY=VALUE",
                   help="another backend option; VALUE is read as JSON when it parses, else as a string "
                        "(e.g. echo: prefix= , delay=0.01)")
    p.add_argument("--tokenizer", metavar="PATH",
                   help="tokenizer.json or model folder: token-level sessions for the echo or remote backend")


def backend_options(args) -> dict:
    """The keyword arguments of ``get_backend(args.backend, ...)``."""
    backend = BACKEND_ALIASES.get(args.backend, args.backend)
    options: dict = {}
    if backend in ("llamacpp", "hf") and args.model:
        options["model"] = args.model
    if backend == "llamacpp":
        given = {"threads": args.threads, "ctx": args.ctx, "sessions": args.sessions}
        options.update((k, v) for k, v in given.items() if v is not None)
    elif any(v is not None for v in (args.threads, args.ctx, args.sessions)):
        raise UsageError("--threads, --ctx and --sessions are options of the llamacpp backend")
    if backend == "remote":
        if not args.base_url:
            raise UsageError("--backend remote needs --base-url URL (and --template or --chat-template)")
        given = {"base_url": args.base_url, "api_key": args.remote_api_key, "model": args.remote_model}
        options.update((k, v) for k, v in given.items() if v is not None)
    for item in args.backend_option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--backend-option {item!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    if args.tokenizer:
        options["tokenizer"] = _tokenizer(args.tokenizer)
    return options


def _tokenizer(path: str):
    from ..extras import needs

    if path.endswith(".json"):
        with needs("--tokenizer FILE.json", "tokens"):
            from tokenizers import Tokenizer

        return Tokenizer.from_file(path)
    with needs("--tokenizer FOLDER", "hf"):
        from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def session_len(template, backend, requested: int | None = None) -> int | None:
    """A session's length: what was asked, else the template's, never more than the backend can hold."""
    limit = getattr(backend, "session_len", None)
    value = requested or template.session_len
    return min(value, limit) if limit else requested
