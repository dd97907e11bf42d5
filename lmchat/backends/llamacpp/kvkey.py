"""The key that authenticates KV files (:mod:`.kvformat`'s MAC).

Whoever can write the KV directory but cannot read this key cannot make the engine load a state it did not
write. By default each KV directory has a key of its own beside it, ``<kv dir>.key`` (``<data dir>/kv.key``
for ``lmchat chat`` and ``lmchat serve``), made at the first start: 32 random bytes (as hex), mode 0600,
written to a temporary name created with ``O_EXCL`` and linked to the key's name, which fails if another
process made it first (then its key is the one). Replicas that share a KV directory are given one key file
instead (``kv_key_file``, ``--kv-key-file``).
"""
from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

#: the least a key file may hold: a 256-bit key
MIN_KEY_BYTES = 32
#: the most read of a key file (a key longer than SHA-256's block is hashed by HMAC anyway)
MAX_KEY_BYTES = 4096


class KVKeyError(Exception):
    """The key cannot be had; the message says why."""


def default_key_path(kv_dir: Path) -> Path:
    return kv_dir.parent / f"{kv_dir.name}.key"


def own_key(path: Path) -> bytes:
    """The key at ``path``, made if there is none. Refused unless it is a regular file (not a link) of this
    user that nobody else may read or write: a key another user could plant or read authenticates nothing."""
    try:
        return _read(path, own=True)
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(8)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with open(fd, "wb") as f:
            f.write(secrets.token_hex(32).encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())  # a key torn by a power cut would refuse every file, and then itself
        with contextlib.suppress(FileExistsError):  # another process made it first: its key is the one
            os.link(tmp, path)
    except OSError as exc:
        raise KVKeyError(f"cannot create the KV key {path}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    try:
        return _read(path, own=True)
    except FileNotFoundError:
        raise KVKeyError(f"the KV key {path} went as it was made") from None


def given_key(path: Path) -> bytes:
    """The key file an operator gave (one for the replicas that share a KV directory: links are followed, a
    mounted secret is one); refused if other users than its owner's group may read or write it."""
    try:
        return _read(path, own=False)
    except FileNotFoundError:
        raise KVKeyError(f"no such KV key file: {path}") from None


def _read(path: Path, own: bool) -> bytes:
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (os.O_NOFOLLOW if own else 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
        raise KVKeyError(f"cannot read the KV key {path}: {why}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KVKeyError(f"the KV key {path} is not a regular file")
        if own and (st.st_uid != os.getuid() or st.st_mode & 0o077):
            raise KVKeyError(f"the KV key {path} must be this user's and mode 0600 (it is user {st.st_uid}'s, "
                             f"mode {stat.S_IMODE(st.st_mode):o}): remove it, a new one is made")
        if st.st_mode & 0o007:
            raise KVKeyError(f"other users may read or write the KV key {path} (mode "
                             f"{stat.S_IMODE(st.st_mode):o}): chmod o-rwx it")
        key = os.read(fd, MAX_KEY_BYTES)
    except OSError as exc:
        raise KVKeyError(f"cannot read the KV key {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(key) < MIN_KEY_BYTES:
        raise KVKeyError(f"the KV key {path} holds {len(key)} bytes, fewer than {MIN_KEY_BYTES}")
    return key
