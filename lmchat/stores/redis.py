"""The Redis session store: several server replicas share sessions through one Redis.

Layout under ``prefix`` (:mod:`.redis_scripts`): per session a hash ``s:<id>``
(base snapshot, version, the columns ``list`` shows) and a list ``p:<id>`` of
the patches since the base; a sorted set of every session by ``updated_at``
(``index``) and one per owner (``owner:<owner>``), which ``list`` reads newest
first.

Every write (save, append, compaction, delete) is one Lua script, so the
compare-and-set and the write are atomic inside Redis: of two replicas that
extend the same version, exactly one writes and the other gets
:class:`StoreConflict`. ``load`` reads the hash and the list in one
``MULTI``/``EXEC``, so it never sees a base without its patches. Each write
carries a token (random, or the caller's idempotency key) that the script
stores: when a connection drops or times out after Redis ran the script, a
retry with the same token finds it and returns the version it wrote instead
of a false conflict; redis-py retries once by itself.

Timeouts are short (``socket_timeout`` and ``socket_connect_timeout``, 2 s):
a Redis that does not answer fails the call rather than the whole server. A
write that timed out raises :class:`StoreTimeout` (its outcome is unknown);
every other Redis failure raises :class:`StoreError` naming the server, never
a redis-py exception.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.retry import Retry

from ..errors import StoreConflict, StoreCorrupt, StoreError, StoreTimeout
from . import records as rules
from . import redis_scripts as scripts
from .base import SessionInfo, Summary, record
from .records import RecordInfo, RecordStore, Stored, check_versions, new_tag


def _without_password(url: str) -> str:
    """The URL to show (``/health``, logs, errors): a password becomes ``***``."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


#: what the scripts answer about a session whose hash holds no number where one belongs (:mod:`.redis_scripts`)
_DAMAGED = "the stored version is not a number"

T = TypeVar("T")
#: a pipeline's replies: redis-py types them Any (text, bytes, numbers or None by command); each is checked
#: where read (``_int``)
Replies = list[Any]
_FIELDS = ("title", "turns", "updated_at", "template", "version", "owner")


class RedisStore(RecordStore):
    """Sessions in Redis at ``url`` (``redis://HOST:PORT/DB``); ``ttl`` in seconds, None: keep forever.

    ``timeout`` (older spelling) sets both socket timeouts at once. The URL's own ``?socket_timeout=S`` and
    ``socket_connect_timeout=S`` win over the arguments, as in redis-py (an operator sets them through
    ``lmchat serve --store``).
    """

    def __init__(self, url: str, prefix: str = "lmchat:", ttl: float | None = None, *,
                 socket_timeout: float = 2.0, socket_connect_timeout: float = 2.0, timeout: float | None = None):
        self.url = url
        self.spec = _without_password(url)
        # its errors name the server for the operator (str(exc): logs, the command line); a client of lmchat serve
        # is told only the reason (StoreError.where), not where the store runs
        self.where = f"Redis at {self.spec}"
        self.prefix = prefix
        self.ttl = ttl
        if timeout is not None:
            socket_timeout = socket_connect_timeout = timeout
        try:
            # redis-py lets the URL's timeouts win over the arguments: the errors must name those
            in_url: dict[str, Any] = parse_url(url)  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
            # one immediate retry reconnects after a Redis restart (pooled sockets are dead then); more would
            # only delay the StoreError of a real outage. Retried scripts are safe: each carries its token.
            self._client = redis.Redis.from_url(
                url, decode_responses=True, socket_timeout=socket_timeout,
                socket_connect_timeout=socket_connect_timeout, retry=Retry(NoBackoff(), 1),
            )
        except ValueError as exc:
            raise StoreError(f"not a Redis URL: {exc}", where=self.spec) from None
        # redis-py writes the server's address into its messages ("Timeout reading from HOST:PORT"), which the
        # reasons carry to lmchat serve's clients: each is replaced (_reason) by words that name no place
        host, port = in_url.get("host", "localhost"), in_url.get("port", 6379)
        self._addresses = [a for a in (f"{host}:{port}", in_url.get("path")) if a]
        self.socket_timeout = in_url.get("socket_timeout", socket_timeout)
        self.socket_connect_timeout = in_url.get("socket_connect_timeout", socket_connect_timeout)
        self._save = self._client.register_script(scripts.SAVE)
        self._append_script = self._client.register_script(scripts.APPEND)
        self._compact = self._client.register_script(scripts.COMPACT)
        self._delete = self._client.register_script(scripts.DELETE)
        self._prune = self._client.register_script(scripts.PRUNE)

    def _key(self, session_id: str) -> str:
        return f"{self.prefix}s:{session_id}"

    def _patches_key(self, session_id: str) -> str:
        return f"{self.prefix}p:{session_id}"

    def _call(self, what: str, fn: Callable[..., T], *args: object, write: bool = False, **kwargs: object) -> T:
        """Run one Redis operation; every failure becomes a StoreError whose reason names no server (its ``where``
        and ``str()`` do, for the operator)."""
        try:
            return fn(*args, **kwargs)
        except redis.TimeoutError as exc:
            if write:
                raise StoreTimeout(
                    f"{what} timed out ({self._reason(exc) or 'no answer'}; socket timeout "
                    f"{self.socket_timeout} s): the outcome is unknown, the write may or may not have been applied; "
                    "retry it with the same token (idempotency key)", server=self.spec, seconds=self.socket_timeout,
                    where=self.where,
                ) from None
            raise StoreError(f"cannot {what}: timed out ({self._reason(exc)}) (is Redis running?)",
                             where=self.where) from None
        except redis.ResponseError as exc:
            if _DAMAGED in str(exc) or "WRONGTYPE" in str(exc):  # Redis answers: the session's keys are bad
                raise StoreCorrupt(f"cannot {what}: {self._reason(exc)[:200]} (the session's keys are damaged)",
                                   where=self.where) from None
            raise StoreError(f"cannot {what}: {self._reason(exc)}", where=self.where) from None
        except redis.RedisError as exc:
            raise StoreError(f"cannot {what}: {self._reason(exc) or type(exc).__name__} (is Redis running?)",
                             where=self.where) from None

    def _reason(self, exc: redis.RedisError) -> str:
        """redis-py's message with the server's address (host:port, a socket's path) replaced."""
        text = str(exc)
        for address in self._addresses:
            text = text.replace(address, "the Redis server")
        return text

    def _write_args(self, rec_id: str, expected: int | None, token: str, summary: Summary
                    ) -> tuple[list[str], list[str | int | None]]:
        keys = [self._key(rec_id), self._patches_key(rec_id), f"{self.prefix}index",
                f"{self.prefix}owner:{summary.owner}"]
        ttl_ms = int(self.ttl * 1000) if self.ttl else 0
        args = ["" if expected is None else expected, token, ttl_ms, rec_id, None, summary.title, summary.turns,
                summary.template, summary.owner, f"{self.prefix}owner:"]
        return keys, args

    # ------------------------------------------------------------------ writes
    def save(self, session_dict: Mapping[str, object], *, expected_version: int | None = None,
             token: str | None = None) -> int:
        rec = record(session_dict)
        keys, args = self._write_args(rec.id, expected_version, token or new_tag(), rec.summary)
        args[4] = rec.data
        args += [new_tag(), len(rec.data)]
        version, detail = self._call(f"save session {rec.id}", self._save, keys=keys, args=args, write=True)
        if version == -1:
            raise StoreConflict(rec.id, expected=expected_version, actual=int(detail))
        return int(version)

    def _append(self, session_id: str, patch: str, expected: int, summary: Summary, token: str) -> tuple[int, bool]:
        keys, args = self._write_args(session_id, expected, token, summary)
        args[4] = patch
        args += [len(patch), rules.COMPACT_AFTER, rules.COMPACT_FLOOR]
        version, detail = self._call(f"append to session {session_id}", self._append_script, keys=keys, args=args,
                                     write=True)
        if version == -1:
            raise StoreConflict(session_id, expected=expected, actual=int(detail))
        return int(version), bool(detail)

    def _install(self, session_id: str, tag: str, at_version: int, base: str, folded_chars: int) -> bool:
        done = self._call(f"compact session {session_id}", self._compact, write=True,
                          keys=[self._key(session_id), self._patches_key(session_id)],
                          args=[tag, at_version, base, new_tag(), len(base), -folded_chars])
        return bool(done)

    def delete(self, session_id: str) -> None:
        self._call(
            f"delete session {session_id}", self._delete, write=True,
            keys=[self._key(session_id), self._patches_key(session_id), f"{self.prefix}index"],
            args=[session_id, f"{self.prefix}owner:"],
        )

    # ------------------------------------------------------------------ reads
    def _read(self, session_id: str) -> Stored | None:
        def read() -> Replies:
            pipe = self._client.pipeline(transaction=True)  # MULTI/EXEC: the hash and the list of one moment
            pipe.hmget(self._key(session_id), "version", "base_version", "base_tag", "data")
            pipe.lrange(self._patches_key(session_id), 0, -1)
            return pipe.execute()

        (version, base_version, tag, data), patches = self._call(f"load session {session_id}", read)
        if version is None:
            return None
        if data is None:
            raise StoreCorrupt(f"session {session_id} has no stored base (field 'data')", where=self.where)
        version = self._int(version, session_id, "version")
        base_version = version if base_version is None else self._int(base_version, session_id, "base_version")
        check_versions(session_id, version, base_version, self.where)
        return Stored(version, base_version, tag or "", data, patches)

    def _int(self, value: str | bytes | int, session_id: str, field: str) -> int:
        try:
            return int(value)
        except (TypeError, ValueError):
            raise StoreCorrupt(f"session {session_id}: field {field!r} is not a number: {value!r:.80}",
                               where=self.where) from None

    def records(self, session_id: str) -> RecordInfo | None:
        def read() -> Replies:
            pipe = self._client.pipeline(transaction=True)
            pipe.hmget(self._key(session_id), "version", "base_version", "base_chars", "patch_chars", "data")
            pipe.llen(self._patches_key(session_id))
            return pipe.execute()

        (version, base_version, base_chars, patch_chars, data), count = self._call(f"read session {session_id}", read)
        if version is None:
            return None
        return RecordInfo(int(version), int(base_version or version), count,
                          int(base_chars) if base_chars is not None else len(data or ""), int(patch_chars or 0))

    def version(self, session_id: str) -> int:
        stored = self._call(f"read session {session_id}", self._client.hget, self._key(session_id), "version")
        if stored is None:
            return 0
        version = self._int(stored, session_id, "version")
        check_versions(session_id, version, 1, self.where)
        return version

    def list(self, limit: int = 50, *, owner: str | None = None) -> list[SessionInfo]:
        index = f"{self.prefix}index" if owner is None else f"{self.prefix}owner:{owner}"
        infos: list[SessionInfo] = []
        seen: set[str] = set()  # a session saved while we page moves up and could come again
        start = 0
        while len(infos) < limit:
            ids: Replies = self._call("list sessions", self._client.zrevrange, index, start, start + limit - 1)
            if not ids:
                break
            start += len(ids)
            pipe = self._client.pipeline(transaction=False)
            for sid in ids:
                pipe.hmget(self._key(sid), *_FIELDS)
            expired = []
            for sid, row in zip(ids, self._call("list sessions", pipe.execute), strict=True):
                if row[0] is None:  # the hash expired: its id lingers in the sorted sets
                    expired.append(sid)
                    continue
                if sid in seen:
                    continue
                seen.add(sid)
                title, turns, updated, template, version, who = row
                try:
                    infos.append(SessionInfo(sid, title, int(turns), float(updated), template, int(version), who))
                except (TypeError, ValueError):
                    raise StoreCorrupt(f"session {sid}: malformed columns {row!r:.200}", where=self.where) from None
            if expired:
                self._call("list sessions", self._prune, keys=[index], args=[f"{self.prefix}s:", *expired])
                start -= len(expired)
        return infos[:limit]

    def latest(self) -> str | None:
        infos = self.list(limit=1)
        return infos[0].id if infos else None

    def close(self) -> None:
        """Release the connection pool."""
        self._client.close()
