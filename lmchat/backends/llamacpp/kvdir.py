"""The KV directory's files, as whoever can write the directory may have left them.

The directory is opened once (:func:`open_dir`) and every file is named relative to that descriptor: the
directory renamed, or replaced by a link, after the start is not followed, and a file's name (a digest and a
suffix) has no other component. Within it nothing is followed or waited for: a name is looked at with
``lstat`` first, so that a FIFO or a device node is never opened (opening one can block, or do what its
driver does on open), then opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked again with ``fstat`` (it may
have been swapped in between); it must be a regular file, and no more bytes are read than its size said
then, within the caller's bound (the tier's budget). Writes go to a fresh temporary name (``O_CREAT |
O_EXCL | O_NOFOLLOW``: nothing planted under that name is written through) and are renamed over the file's
name.
"""
from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from .kvformat import Header, KVFileRejected, read_head, read_ids

#: a temporary older than this is a write a crash cut short; a younger one may be another replica's, being written
STALE_SECONDS = 600.0
Parts = Iterable[bytes | bytearray | memoryview]


class Files(Protocol):
    """Where a KV tier keeps its files, by name: a directory (:class:`DirFiles`) or a Redis server
    (:class:`.kvredis.RedisFiles`). Nothing read is trusted: the tier checks it (:mod:`.kvformat`)."""

    where: str  # for the log and the stats

    def names(self) -> list[str]:
        """Every name held (OSError: none can be listed now)."""

    def head(self, name: str, max_ids: int) -> tuple[Header, bytes | None, int, float]:
        """The header of ``name``, its raw ids (None: it holds more than ``max_ids``, not read), its size and
        when it was written; :class:`KVFileRejected` if it cannot be read or is not a KV file."""

    def read(self, name: str, limit: int) -> bytearray:
        """The whole of ``name``, at most ``limit`` bytes; :class:`KVFileRejected` if it cannot be."""

    def write(self, name: str, parts: Parts) -> None:
        """Publish ``parts`` as ``name`` at once (a reader sees the old or the new, whole); OSError if not."""

    def delete(self, name: str) -> None:
        """Remove ``name``, if it can be."""

    def sweep(self) -> None:
        """At the start: remove what writes a crash cut short left."""

    def close(self) -> None: ...


class DirFiles:
    """The files of a directory, opened once (:func:`open_dir`; OSError if it cannot be)."""

    def __init__(self, path: Path) -> None:
        self.where = str(path)
        self._dir = open_dir(path)

    def names(self) -> list[str]:
        return os.listdir(self._dir)

    def head(self, name: str, max_ids: int) -> tuple[Header, bytes | None, int, float]:
        fd, st = open_regular(self._dir, name)
        try:
            header = read_head(fd, st.st_size)
            return header, read_ids(fd, header) if header.n_ids <= max_ids else None, st.st_size, st.st_mtime
        finally:
            os.close(fd)

    def read(self, name: str, limit: int) -> bytearray:
        return read_regular(self._dir, name, limit)

    def write(self, name: str, parts: Parts) -> None:
        write(self._dir, name, parts)

    def delete(self, name: str) -> None:
        unlink(self._dir, name)

    def sweep(self) -> None:
        """Temporaries old enough to be a crash's (a younger one may be another replica's write in progress)."""
        for name in os.listdir(self._dir):
            if not is_temporary(name):
                continue
            try:
                age = time.time() - os.stat(name, dir_fd=self._dir, follow_symlinks=False).st_mtime
            except OSError:
                continue
            if age > STALE_SECONDS:
                unlink(self._dir, name)

    def close(self) -> None:
        if self._dir >= 0:
            os.close(self._dir)
            self._dir = -1

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_WHAT = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def open_dir(path: Path) -> int:
    """A descriptor of the directory ``path`` (created if missing; a link to it, there at the start, is the
    operator's and followed this once)."""
    path.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def is_temporary(name: str) -> bool:
    """A temporary name of :func:`write` (a write a crash cut short, if no writer is at it)."""
    return name.startswith(".") and ".tmp-" in name


def open_regular(dfd: int, name: str) -> tuple[int, os.stat_result]:
    """A read-only descriptor of the regular file ``name`` and its status; :class:`KVFileRejected` if it is
    anything else (a link, a FIFO, a device...) or cannot be opened."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        fd = os.open(name, _READ, dir_fd=dfd) if stat.S_ISREG(st.st_mode) else -1
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link swapped in after the lstat
            raise KVFileRejected("is a symbolic link, not a regular file", "not a file") from None
        if exc.errno == errno.ENOENT:  # removed since it was listed: by another replica of a shared directory
            raise KVFileRejected("was removed before it could be read (evicted by another replica sharing the "
                                 "directory, or cleared)", "gone") from None
        raise KVFileRejected(f"could not be read ({exc.strerror or exc})", "unreadable") from None
    if fd >= 0:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            return fd, st
        os.close(fd)
    what = next((text for test, text in _WHAT if test(st.st_mode)), "not a regular file")
    raise KVFileRejected(f"is {what}, not a regular file", "not a file")


def read_regular(dfd: int, name: str, limit: int) -> bytearray:
    """The whole of the regular file ``name``: the bytes its size said when it was opened, at most ``limit``."""
    fd, st = open_regular(dfd, name)
    try:
        size = st.st_size
        if size > limit:
            raise KVFileRejected(f"is larger than the whole disk tier ({limit} bytes)", "too large")
        data = bytearray(size)
        view, got = memoryview(data), 0
        with io.FileIO(fd, closefd=False) as f:
            while got < size and (n := f.readinto(view[got:])):
                got += n
        if got < size:
            raise KVFileRejected("is truncated", "truncated")
        return data
    except OSError as exc:
        raise KVFileRejected(f"could not be read ({exc.strerror or exc})", "unreadable") from None
    finally:
        os.close(fd)


def write(dfd: int, name: str, parts: Parts) -> None:
    """Write ``parts`` as the file ``name``: to a temporary name of its own, then renamed (a reader sees the
    old file or the new one); OSError if it cannot be, leaving nothing behind."""
    tmp = f".{name}.tmp-{secrets.token_hex(8)}"
    fd = os.open(tmp, _CREATE, 0o666, dir_fd=dfd)
    try:
        with open(fd, "wb") as f:
            for part in parts:
                f.write(part)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        unlink(dfd, tmp)
        raise


def unlink(dfd: int, name: str) -> None:
    """Remove ``name`` (a link itself, never what it points to), if it can be."""
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=dfd)
