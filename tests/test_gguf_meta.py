"""lmchat's own GGUF metadata reader, against the ``gguf`` package's on real files."""
from __future__ import annotations

import pytest

from lmchat.interop.gguf_meta import GGUFError, is_gguf, read_gguf_metadata, read_gguf_strings

from . import gguf_files

gguf = pytest.importorskip("gguf")


def reference(path) -> dict:
    """Every scalar and string of the metadata, as ``gguf.GGUFReader`` reads them."""
    reader = gguf.GGUFReader(path, "r")
    return {key: field.contents() for key, field in reader.fields.items()
            if not key.startswith("GGUF.") and field.types[0] != gguf.GGUFValueType.ARRAY}


def test_tokens_are_read_by_id_as_gguf_reads_them():
    path = gguf_files.bundled_gguf()
    tokens = gguf.GGUFReader(path, "r").fields["tokenizer.ggml.tokens"].contents()
    ids = [0, 1, 2, 17, 1000, len(tokens) - 1]
    assert read_gguf_strings(path, "tokenizer.ggml.tokens", ids) == {i: tokens[i] for i in ids}
    assert read_gguf_strings(path, "tokenizer.ggml.tokens", [len(tokens), 10**9]) == {}  # past the end
    assert read_gguf_strings(path, "tokenizer.ggml.token_type", [0]) == {}  # numbers, not strings
    assert read_gguf_strings(path, "no.such.key", [0]) == {}


def test_the_bundled_file_reads_as_gguf_reads_it():
    path = gguf_files.bundled_gguf()
    assert is_gguf(path) and read_gguf_metadata(path) == reference(path)


def test_the_other_family_is_read_past_its_vocabulary(tmp_path_factory):
    """262,144 tokens and their scores and types come before the last keys (gguf's reader takes 20 s on it)."""
    metadata = read_gguf_metadata(gguf_files.other_family_gguf(tmp_path_factory))
    assert {k: metadata[k] for k in ("general.architecture", "general.name", "general.basename")} == {
        "general.architecture": "gemma3", "general.name": "Gemma 3 270m", "general.basename": "gemma-3"}
    assert metadata["general.file_type"] == 15 and metadata["tokenizer.ggml.add_space_prefix"] is False
    assert "tokenizer.chat_template" not in metadata  # the base model ships none


def test_only_the_keys_asked_for():
    metadata = read_gguf_metadata(gguf_files.bundled_gguf(), ["general.basename", "no.such.key"])
    assert metadata == {"general.basename": "smollm2"}


def test_big_endian_files(tmp_path):
    path = tmp_path / "big.gguf"
    writer = gguf.GGUFWriter(str(path), "llama", endianess=gguf.GGUFEndian.BIG)
    writer.add_name("Big One")
    writer.add_array("tokenizer.ggml.tokens", ["a", "bb"])
    writer.add_uint32("llama.context_length", 4096)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    assert read_gguf_metadata(path) == {"general.architecture": "llama", "general.name": "Big One",
                                        "llama.context_length": 4096}


def test_what_is_not_a_readable_gguf(tmp_path):
    text = tmp_path / "model.gguf"
    text.write_text("{{ messages }}")
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    assert not is_gguf(text) and not is_gguf(empty) and not is_gguf(tmp_path / "missing.gguf")
    for path in (text, empty):
        with pytest.raises(GGUFError):
            read_gguf_metadata(path)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(gguf_files.bundled_gguf().read_bytes()[:4096])  # the header ends inside the vocabulary
    with pytest.raises(GGUFError, match="damaged"):
        read_gguf_metadata(cut)


def test_a_short_array_of_numbers_asked_for_by_name(tmp_path):
    """A value per layer (OpenELM's and Gemma 3n's attention.head_count_kv): read as a list when asked for,
    with the vocabulary's arrays still skipped; the REPL sizes the context from it (lmchat/repl/context.py)."""
    from lmchat.repl.context import gguf_fields, kv_bytes_per_token

    path = tmp_path / "layers.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("tokenizer.ggml.tokens", ["a", "bb"])
    for key, value in {"context_length": 2048, "block_count": 3, "embedding_length": 64,
                       "attention.head_count": 4}.items():
        writer.add_uint32(f"llama.{key}", value)
    writer.add_array("llama.attention.head_count_kv", [1, 2, 4])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    assert read_gguf_metadata(path) == read_gguf_metadata(path, None)  # unasked, arrays stay skipped
    assert "llama.attention.head_count_kv" not in read_gguf_metadata(path)
    assert read_gguf_metadata(path, ["llama.attention.head_count_kv"]) == {"llama.attention.head_count_kv": [1, 2, 4]}
    fields = gguf_fields(path)
    assert fields["attention.head_count_kv"] == [1, 2, 4]
    assert kv_bytes_per_token(fields) == (1 + 2 + 4) * (16 + 16) * 2  # f16 keys and values, head size 64 / 4


def test_a_conversion_parses_the_gguf_once_and_leaves_gguf_as_it_was(tmp_path):
    """transformers reads a GGUF three times in one --backend hf conversion: lmchat's conversion makes gguf's
    reader and tensor-name map once each (lmchat/backends/hf/convert.py), and only while it converts. The
    converted weights are byte-identical either way (test_hf_backend's model answers as before)."""
    gguf = pytest.importorskip("gguf")
    from lmchat.backends.hf.convert import gguf_parsed_once

    path = str(gguf_files.metadata_only(tmp_path / "m.gguf", "llama", general_name="tiny"))
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with gguf_parsed_once():
        assert gguf.GGUFReader(path) is gguf.GGUFReader(path)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, name_map)
    assert gguf.GGUFReader(path) is not gguf.GGUFReader(path)
