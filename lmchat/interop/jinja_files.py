"""Read a chat template and its model's settings from a Hugging Face folder or a GGUF file.

Both readers return :class:`~lmchat.interop.jinja.JinjaTemplate` keyword arguments.
Which template files of a folder count is transformers' rule (:func:`shipped_templates`),
which fingerprint matching reads too.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import TemplateConfigError
from ..jsonfile import read_json
from ..jsontypes import JSONObject
from .gguf_meta import GGUFError, read_gguf_metadata, read_gguf_strings

#: generation_config.json keys copied as they are
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "repetition_penalty")
#: config.json keys holding the context length, most specific first
CONTEXT_KEYS = ("max_position_embeddings", "seq_length", "max_sequence_length", "n_positions")
#: JinjaTemplate's keyword arguments as read (Any: ``JinjaTemplate(**fields)`` takes them, and its fields check
#: their values, templates/fields.py; a file's value of the wrong type is that check's error)
Fields = dict[str, Any]


def _json_object(path: Path) -> JSONObject:
    """A folder's JSON file as an object; {} when the folder does not have it."""
    if not path.is_file():
        return {}
    data = read_json(str(path), TemplateConfigError)
    if not isinstance(data, dict):
        raise TemplateConfigError("expected a JSON object", source=str(path))
    return data


def _token_text(value: object) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if isinstance(value, str):
        return value
    content = value.get("content") if isinstance(value, dict) else None
    return content if isinstance(content, str) else None


def special_tokens(config: Mapping[str, object]) -> dict[str, str]:
    """Every ``*_token`` string of a tokenizer config, as transformers 5.x passes them to templates."""
    tokens = {k: _token_text(v) for k, v in config.items() if k.endswith("_token")}
    extra = config.get("extra_special_tokens")
    if isinstance(extra, dict):
        tokens.update({k: _token_text(v) for k, v in extra.items()})
    return {k: v for k, v in tokens.items() if v is not None}


def named_templates(value: object, source: str) -> dict[str, str]:
    """A ``chat_template`` value as name -> source: a string is the 'default', a list holds {name, template}."""
    if isinstance(value, str):
        return {"default": value}
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        try:
            return {t["name"]: t["template"] for t in value}
        except (KeyError, TypeError):
            pass
    raise TemplateConfigError("expected a string, or a list of {name, template} objects",
                              field="chat_template", source=source)


def shipped_templates(folder: Path, config: Mapping[str, object] | None = None) -> tuple[str, dict[str, str]] | None:
    """``(file, name -> source)`` of the chat templates a model folder ships (a single one is 'default'), or None.

    transformers' precedence: separate template files (``chat_template.jinja``
    plus ``additional_chat_templates/*.jinja``) win over a processor's
    ``chat_template.json``, which wins over ``tokenizer_config.json``
    (``config``, when the caller has read it already).
    """
    found: dict[str, str] = {}
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        found["default"] = jinja_file.read_text(encoding="utf-8")
    extra_dir = folder / "additional_chat_templates"
    if extra_dir.is_dir():
        for f in sorted(extra_dir.glob("*.jinja")):
            found[f.stem] = f.read_text(encoding="utf-8")
    if found:
        return "chat_template.jinja" if "default" in found else "additional_chat_templates", found
    for name in ("chat_template.json", "tokenizer_config.json"):
        data = config if name == "tokenizer_config.json" and config is not None else _json_object(folder / name)
        if data.get("chat_template"):
            return name, named_templates(data["chat_template"], str(folder / name))
    return None


def _token_ids(folder: Path, config: Mapping[str, object]) -> dict[int, str]:
    """Token id -> text for the added tokens, which is where eos ids resolve (entries of other shapes: none)."""
    decoder = config.get("added_tokens_decoder")
    table = {int(k): _token_text(v) for k, v in (decoder if isinstance(decoder, dict) else {}).items()}
    tokenizer = folder / "tokenizer.json"
    if tokenizer.is_file():
        added = _json_object(tokenizer).get("added_tokens")
        for t in added if isinstance(added, list) else []:
            if isinstance(t, dict) and isinstance(t.get("id"), int):
                table.setdefault(t["id"], t.get("content"))
    return {k: v for k, v in table.items() if isinstance(v, str)}


def _as_list(value: object) -> list[object]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _sampling(folder: Path, config: Mapping[str, object], tokens: dict[str, str]) -> Fields:
    gen = _json_object(folder / "generation_config.json")
    model = _json_object(folder / "config.json")
    text_model = model.get("text_config")
    text_model = text_model if isinstance(text_model, dict) else {}
    out: Fields = {k: gen[k] for k in SAMPLING_KEYS if gen.get(k) is not None}
    context = [gen.get("max_length")] + [m.get(k) for k in CONTEXT_KEYS for m in (model, text_model)]
    session_len = next((c for c in context if isinstance(c, int) and c > 0), None)
    if session_len:
        out["session_len"] = session_len
    ids = _as_list(gen.get("eos_token_id")) or _as_list(model.get("eos_token_id"))
    names = _token_ids(folder, config)
    stops = [names[i] for i in ids if isinstance(i, int) and i in names]
    if ids:
        # the eos token itself stops generation even when an id does not resolve
        words = stops + ([tokens["eos_token"]] if "eos_token" in tokens else [])
        out["stop_words"] = tuple(dict.fromkeys(words)) or None
    return out


def read_pretrained(folder: str | os.PathLike[str]) -> Fields:
    """JinjaTemplate fields from a Hugging Face model (or tokenizer) folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TemplateConfigError("not a directory", source=str(folder))
    config = _json_object(folder / "tokenizer_config.json")
    shipped = shipped_templates(folder, config)
    if shipped is None:
        raise TemplateConfigError(
            "no chat template (chat_template.jinja, chat_template.json or tokenizer_config.json)", source=str(folder)
        )
    templates = shipped[1]
    tokens = special_tokens(config)
    default = templates.pop("default", "")
    return {
        "chat_template": default,
        "named_templates": templates,
        "special_tokens": tokens,
        "label": folder.resolve().name,
        **_sampling(folder, config, tokens),
    }


# ---------------------------------------------------------------------- GGUF
#: the special tokens a template refers to, by the metadata key of their id
SPECIAL_IDS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id", "unk_token": "unknown_token_id",
               "pad_token": "padding_token_id"}
NAMED = "tokenizer.chat_template."


def read_gguf(path: str | os.PathLike[str]) -> Fields:
    """JinjaTemplate fields from GGUF metadata (``tokenizer.chat_template[.NAME]``, bos/eos ids).

    Read with lmchat's own header reader (gguf_meta.py), which skips the vocabulary by its lengths: the
    ``gguf`` package's reader parses every array and tensor entry first (2.8 s on the bundled 94 MB file)."""
    path = Path(path)
    if not path.is_file():
        raise TemplateConfigError("no such file", source=str(path))
    try:
        meta = read_gguf_metadata(path)
        ids = {key: meta.get(f"tokenizer.ggml.{name}") for key, name in SPECIAL_IDS.items()}
        texts = read_gguf_strings(path, "tokenizer.ggml.tokens", (i for i in ids.values() if isinstance(i, int)))
    except (GGUFError, OSError) as exc:
        raise TemplateConfigError(f"not a readable GGUF file: {exc}", source=str(path)) from None
    source = meta.get("tokenizer.chat_template")
    named = {key[len(NAMED):]: value for key, value in meta.items() if key.startswith(NAMED) and isinstance(value, str)}
    if not source and not named:
        raise TemplateConfigError("no tokenizer.chat_template in the GGUF metadata", source=str(path))
    tokens = {key: texts[i] for key, i in ids.items() if isinstance(i, int) and i in texts}
    arch = meta.get("general.architecture")
    out: Fields = {"chat_template": source or "", "named_templates": named, "special_tokens": tokens,
                   "label": meta.get("general.name") or path.stem}
    context = meta.get(f"{arch}.context_length") if arch else None
    if isinstance(context, int) and context > 0:
        out["session_len"] = context
    return out
