"""The backend options ``lmchat chat`` and ``lmchat serve`` share, spelled the same in both."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..backends.base import BACKEND_ALIASES, BACKENDS, Backend, PromptFormat, SessionLimit
from ..jsontypes import JSONObject
from ..session.vocab import Tokenizer
from .main import UsageError

if TYPE_CHECKING:
    from ..templates.base import BaseTemplate

PROMPT_FORMATS = ("auto", "ids", "text")  # lmchat.backends.remote's, without importing httpx here

DEFAULT = "llamacpp"


def add_backend_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=[*BACKENDS, *BACKEND_ALIASES], default=DEFAULT,
                   help="what generates the answers (default: llamacpp, the bundled SmolLM2 or --model, offline; "
                        "'embedded' is the same; hf: transformers and torch, for model folders)")
    p.add_argument("--model", "-m", metavar="PATH",
                   help="llamacpp: any .gguf file instead of the bundled model (default: the bundled SmolLM2; "
                        "`lmchat models` says where it is); hf: a model folder or .gguf")
    engine = p.add_argument_group("llamacpp backend (docs/backends.md)")
    engine.add_argument("--threads", "-t", type=int, metavar="N",
                        help="llama.cpp threads (default: the CPUs available; said at start)")
    engine.add_argument("--ctx", "-c", "--ctx-size", type=int, metavar="TOKENS",
                        help="KV cache over all resident sessions (default: --sessions x min(4096, the model's))")
    engine.add_argument("--sessions", type=int, metavar="N",
                        help="sessions whose KV stays in llama.cpp at once (default: 4); others wait in host memory")
    engine.add_argument("--kv-host-mb", type=float, metavar="MB",
                        help="host memory for KV states evicted from llama.cpp (default: 512)")
    engine.add_argument("--kv-dir", metavar="DIR",
                        help="KV files kept across restarts, verified before use (default: <data dir>/kv)")
    engine.add_argument("--kv-disk-mb", type=float, metavar="MB",
                        help="the most the KV files may take (default: 4096; 0: no disk tier)")
    engine.add_argument("--kv-key-file", metavar="FILE",
                        help="the key that authenticates the KV files, the same file for replicas that share a "
                             "--kv-dir (default: <kv dir>.key, made at the first start with mode 0600)")
    engine.add_argument("--kv-shared", nargs="?", const=True, default=None, type=_redis_url,
                        metavar="redis://HOST:PORT/DB",
                        help="a KV tier replicas share (docs/scaling.md): each turn's state is published as it ends, "
                             "and states other replicas publish are used; alone: the --kv-dir is shared; with a Redis "
                             "URL: kept in that Redis, at most --kv-disk-mb (give the replicas one --kv-key-file); "
                             "default: none, each replica keeps its own")
    engine.add_argument("--gpu-layers", "-ngl", "--n-gpu-layers", type=_gpu_layers, metavar="N|auto",
                        help="layers offloaded to the GPU (default: auto, all of them when llama-cpp-python was "
                             "built with a GPU backend, else 0; N > 0 without one: a warning, the CPU)")
    remote = p.add_argument_group("remote backend (an OpenAI-compatible completions server)")
    remote.add_argument("--base-url", metavar="URL", help="the server's URL (no default: --backend remote needs it)")
    remote.add_argument("--remote-api-key", dest="remote_api_key", metavar="KEY",
                        help="the server's API key (default: none)")
    remote.add_argument("--remote-model", dest="remote_model", metavar="NAME",
                        help="the model name to send (default: none, the server's own)")
    remote.add_argument("--prompt-format", choices=PROMPT_FORMATS, default=None,
                        help="send prompts as token ids (content never parsed as special tokens; needs --tokenizer) "
                             "or as text; auto (default): ids when --tokenizer is given and the server takes them")
    remote.add_argument("--allow-special-text", action="store_true",
                        help="when prompts go as text, accept messages holding the template's special strings "
                             "(the server would read them as markup; refused by default)")
    p.add_argument("--backend-option", action="append", default=[], metavar="KEY=VALUE",
                   help="another backend option; VALUE is read as JSON when it parses, else as a string "
                        "(e.g. echo: prefix= , delay=0.01)")
    p.add_argument("--tokenizer", metavar="PATH",
                   help="tokenizer.json, model folder or .gguf file (the served model's): token-level sessions for "
                        "the echo or remote backend; remote: prompts as token ids when the server takes them "
                        "(default: the backend's own, none for echo and remote: sessions count characters)")


def _redis_url(text: str) -> str:
    if text.partition("://")[0] not in ("redis", "rediss", "unix"):
        raise argparse.ArgumentTypeError("a Redis URL: redis://HOST:PORT/DB, rediss://... or unix://PATH "
                                         "(alone, --kv-shared shares the --kv-dir)")
    return text


def backend_options(args: argparse.Namespace) -> JSONObject:
    """The keyword arguments of ``get_backend(args.backend, ...)``."""
    backend = BACKEND_ALIASES.get(args.backend, args.backend)
    options: JSONObject = {}
    if backend in ("llamacpp", "hf") and args.model:
        options["model"] = args.model
    if backend == "llamacpp":
        from ..backends.llamacpp.backend import KVTiers  # (llama_cpp itself is loaded when the backend starts)

        given = {"threads": args.threads, "ctx": args.ctx, "sessions": args.sessions, "gpu_layers": args.gpu_layers}
        options.update((k, v) for k, v in given.items() if v is not None)
        tiers = {"host_cache_mb": args.kv_host_mb, "kv_disk_mb": args.kv_disk_mb,
                 "kv_key_file": args.kv_key_file or None, "kv_shared": args.kv_shared}
        options["kv"] = KVTiers(kv_dir=args.kv_dir or str(default_kv_dir()),
                                **{k: v for k, v in tiers.items() if v is not None})
        _warnings_to_stderr()
    elif any(v is not None for v in (args.threads, args.ctx, args.sessions, args.kv_host_mb, args.kv_dir,
                                      args.kv_disk_mb, args.kv_key_file, args.gpu_layers, args.kv_shared)):
        raise UsageError("--threads, --ctx, --sessions, --gpu-layers and the --kv-* options are options of the "
                         "llamacpp backend")
    if backend == "remote":
        if not args.base_url:
            raise UsageError("--backend remote needs --base-url URL (and --template or --chat-template)")
        given = {"base_url": args.base_url, "api_key": args.remote_api_key, "model": args.remote_model,
                 "prompt_format": args.prompt_format}
        options.update((k, v) for k, v in given.items() if v is not None)
    elif args.prompt_format is not None or args.allow_special_text:
        raise UsageError("--prompt-format and --allow-special-text are options of the remote backend")
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


def _gpu_layers(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        layers = int(value)
    except ValueError:
        layers = -1
    if layers < 0:
        raise argparse.ArgumentTypeError(f"expected a number of layers >= 0 or 'auto', got {value!r}")
    return layers


def _warnings_to_stderr() -> None:
    """The llamacpp backend's own warnings (e.g. --gpu-layers on a CPU-only build) as one stderr line each;
    llama.cpp's log lines (INFO there) stay out of the terminal. A server's console (``logs.to_console``)
    shows them already."""
    logger = logging.getLogger("lmchat.llamacpp")
    if not logging.getLogger("lmchat").handlers and not any(isinstance(h, _Stderr) for h in logger.handlers):
        logger.addHandler(_Stderr(logging.WARNING))


class _Stderr(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        print(f"lmchat: warning: {record.getMessage()}", file=sys.stderr)  # today's stderr, not the first one


def default_kv_dir() -> Path:
    """Where the llamacpp backend keeps its KV files unless ``--kv-dir`` says (the data dir's ``kv``)."""
    from ..paths import data_dir

    return data_dir() / "kv"


def _tokenizer(path: str) -> Tokenizer:
    from ..extras import needs

    if path.endswith(".gguf"):  # llama.cpp's own vocabulary of the served GGUF (llama-server)
        with needs("--tokenizer FILE.gguf", "local"):
            from ..backends.llamacpp._lib import load_model
            from ..backends.llamacpp.vocab import LlamaVocab

        return LlamaVocab(load_model(Path(path)))
    if path.endswith(".json"):
        with needs("--tokenizer FILE.json", "tokens"):
            from tokenizers import Tokenizer

        return Tokenizer.from_file(path)
    with needs("--tokenizer FOLDER", "hf"):
        from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def session_len(template: BaseTemplate, backend: Backend, requested: int | None = None) -> int | None:
    """A session's length: what was asked, else the template's, never more than the backend can hold."""
    limit = backend.session_len if isinstance(backend, SessionLimit) else None
    value = requested or template.session_len
    return min(value, limit) if limit else requested


def injection_policy(backend: Backend, args: argparse.Namespace) -> str | None:
    """``'reject'`` when a remote backend sends text prompts and ``--allow-special-text`` was not given.

    A text prompt is tokenized again by the server with special-token parsing on: a typed
    ``<|im_end|>`` would become a control token there. Token-id prompts never are. None: keep
    the sessions' default (or stored) policy.
    """
    if not isinstance(backend, PromptFormat) or getattr(args, "allow_special_text", False):
        return None
    return "reject" if backend.resolve_prompt_format() == "text" else None
