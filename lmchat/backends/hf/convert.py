"""Where the embedded model's weights come from: a GGUF file converted once into a safetensors folder.

Reading a GGUF with transformers de-quantizes every tensor and parses the
tokenizer out of the metadata, which takes tens of seconds on a laptop CPU.
The first start therefore writes the result with ``save_pretrained`` into a
cache folder; later starts load that folder (memory-mapped safetensors) in a
second or two.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ... import paths

#: written last: a folder without it is an interrupted conversion
MARKER = "lmchat-converted.json"


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``cache_dir``, else ``$LMCHAT_CACHE_DIR``, else the platform's user cache dir for lmchat."""
    return Path(cache_dir) if cache_dir else paths.cache_dir()


def converted_folder(gguf: Path, root: Path) -> Path:
    """The cache folder of ``gguf``: a new file (another size or mtime) gets a new folder."""
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:12]
    return root / "models" / f"{gguf.stem}-{key}"


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Hide transformers' own tqdm bars and info logs while loading (the REPL owns the terminal)."""
    from transformers.utils import logging

    verbosity = logging.get_verbosity()
    bars = logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


@contextlib.contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """Within one conversion, gguf's reader and tensor-name map made once each.

    transformers parses the file three times (the config, the weights, the tokenizer), each a full ``GGUFReader``
    that walks all 49,152 token strings of the bundled model through numpy memmaps (3-4 s each here), and builds
    gguf's ``TensorNameMap`` again for every module it maps (397 times, 3-5 s in all). Neither changes during a
    conversion and transformers offers no way to pass them in, so the two names it imports from ``gguf`` at call
    time are memoized while converting and restored after: 19.3 s -> 10.3 s on the bundled model (AMD EPYC, 2
    cores, load 0.6), the safetensors written byte-identical.
    Both are read-only once made (a memmap opened "r", a lookup table)."""
    import gguf

    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.cache(reader)  # type: ignore[misc,assignment]
    gguf.get_tensor_name_map = functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map  # type: ignore[misc]


def ensure_converted(gguf: Path, root: Path) -> Path:
    """The converted folder of ``gguf``, converting it first if needed (with a progress bar on stderr)."""
    folder = converted_folder(gguf, root)
    if (folder / MARKER).is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    # convert into a private folder and rename it at the end, so a crash or a second process
    # converting at the same time never leaves a half-written folder behind
    tmp = Path(tempfile.mkdtemp(prefix=".converting-", dir=folder.parent))
    try:
        _convert(gguf, tmp)
        try:
            os.rename(tmp, folder)
        except OSError:
            if not (folder / MARKER).is_file():  # not another process's finished conversion
                shutil.rmtree(folder, ignore_errors=True)
                os.rename(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _convert(gguf: Path, out: Path) -> None:
    import torch
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    console = Console(file=sys.stderr)  # bound now: the weights are read with sys.stderr redirected
    console.print(f"lmchat: converting {gguf.name} once into {out.parent} (later starts load it directly)")
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    progress = Progress(*columns, console=console, transient=True, redirect_stdout=False, redirect_stderr=False)
    with progress, quiet_transformers(), gguf_parsed_once():
        task = progress.add_task("reading weights from the GGUF", total=3)
        # the GGUF reader draws its own tqdm bar, which no transformers setting turns off
        with contextlib.redirect_stderr(io.StringIO()):
            # dequantize=True: plain float tensors, which save_pretrained can write (GGUF blocks cannot be saved)
            model = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32,
                quantization_config=GgufConfig(dequantize=True),
            )
        progress.update(task, advance=1, description="reading the tokenizer")
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        progress.update(task, advance=1, description="writing safetensors")
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        (out / MARKER).write_text(json.dumps({"source": str(gguf.resolve()), "size": gguf.stat().st_size}) + "\n")
        progress.update(task, advance=1)
    console.print(f"lmchat: converted in {progress.tasks[0].elapsed:.0f} s")
