"""The Redis session store: several server replicas share sessions through one Redis.

Layout under ``prefix``: a hash per session (``s:<id>``: data, version,
title, turns, template, owner, updated_at, token), a sorted set of every
session by ``updated_at`` (``index``) and one per owner (``owner:<owner>``),
which ``list`` reads newest first.

A save is one Lua script, so the compare-and-set and the write are atomic
inside Redis: of two replicas that extend the same version, exactly one
writes and the other gets :class:`StoreConflict`. Scripts also take the time
from Redis, so replicas with skewed clocks still list in save order. Each
save carries a random token that the script stores: when a connection drops
after Redis ran the script, the client's one retry finds its own token and
returns the version it wrote instead of a false conflict.

With ``ttl`` (seconds) a session expires that long after its last save; the
sorted sets keep expired ids until ``list`` meets and removes them. Every
Redis failure (refused, timed out, killed mid-command) raises
:class:`StoreError` naming the server, never a redis-py exception.
"""
from __future__ import annotations

import uuid
from typing import Any, Mapping

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..errors import StoreConflict, StoreError
from .base import SessionInfo, loaded, record

#: KEYS: session hash, index, owner set. ARGV: expected ('' = any), token, ttl ms (0 = none), id,
#: data, title, turns, template, owner, owner-set key prefix (to leave a previous owner's set).
#: Returns {version, updated_at} or {-1, actual version}.
_SAVE = """
local cur = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if ARGV[1] ~= '' and tonumber(ARGV[1]) ~= cur then
  if cur > 0 and redis.call('HGET', KEYS[1], 'token') == ARGV[2] then
    return {cur, redis.call('HGET', KEYS[1], 'updated_at')}
  end
  return {-1, cur}
end
local old_owner = redis.call('HGET', KEYS[1], 'owner')
if old_owner and old_owner ~= ARGV[9] then
  redis.call('ZREM', ARGV[10] .. old_owner, ARGV[4])
end
local t = redis.call('TIME')
local now = tostring(tonumber(t[1]) + tonumber(t[2]) / 1000000)
local v = cur + 1
redis.call('HSET', KEYS[1], 'version', v, 'token', ARGV[2], 'data', ARGV[5], 'title', ARGV[6],
           'turns', ARGV[7], 'template', ARGV[8], 'owner', ARGV[9], 'updated_at', now)
if tonumber(ARGV[3]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
  redis.call('PERSIST', KEYS[1])
end
redis.call('ZADD', KEYS[2], now, ARGV[4])
redis.call('ZADD', KEYS[3], now, ARGV[4])
return {v, now}
"""

#: KEYS: session hash, index; ARGV: id, owner-set key prefix
_DELETE = """
local owner = redis.call('HGET', KEYS[1], 'owner')
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if owner then
  redis.call('ZREM', ARGV[2] .. owner, ARGV[1])
end
return 1
"""

#: KEYS: a sorted set; ARGV: hash key prefix, then ids whose hashes were found missing.
#: Removes those still missing (one may have been saved again since it was read).
_PRUNE = """
for i = 2, #ARGV do
  if redis.call('EXISTS', ARGV[1] .. ARGV[i]) == 0 then
    redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return 1
"""

def _without_password(url: str) -> str:
    """The URL to show (``/health``, logs): a password becomes ``***``."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


_FIELDS = ("title", "turns", "updated_at", "template", "version", "owner")


class RedisStore:
    """Sessions in Redis at ``url`` (``redis://HOST:PORT/DB``); ``ttl`` in seconds, None: keep forever."""

    def __init__(self, url: str, prefix: str = "lmchat:", ttl: float | None = None, timeout: float = 5.0):
        self.url = url
        self.spec = _without_password(url)
        self.prefix = prefix
        self.ttl = ttl
        try:
            # one immediate retry reconnects after a Redis restart (pooled sockets are dead then);
            # more would only delay the StoreError of a real outage
            self._client = redis.Redis.from_url(
                url, decode_responses=True, socket_timeout=timeout, socket_connect_timeout=timeout,
                retry=Retry(NoBackoff(), 1),
            )
        except ValueError as exc:
            raise StoreError(f"{url}: not a Redis URL: {exc}") from None
        self._save = self._client.register_script(_SAVE)
        self._delete = self._client.register_script(_DELETE)
        self._prune = self._client.register_script(_PRUNE)

    def _key(self, session_id: str) -> str:
        return f"{self.prefix}s:{session_id}"

    def _call(self, what: str, fn, *args, **kwargs):
        """Run one Redis operation; every failure becomes a StoreError that names the server."""
        try:
            return fn(*args, **kwargs)
        except redis.RedisError as exc:
            raise StoreError(
                f"Redis at {self.url}: cannot {what}: {exc or type(exc).__name__} (is Redis running?)"
            ) from None

    # ------------------------------------------------------------------ protocol
    def save(self, session_dict: Mapping[str, Any], *, expected_version: int | None = None) -> int:
        rec = record(session_dict)
        ttl_ms = int(self.ttl * 1000) if self.ttl else 0
        keys = [self._key(rec.id), f"{self.prefix}index", f"{self.prefix}owner:{rec.owner}"]
        args = [
            "" if expected_version is None else expected_version, uuid.uuid4().hex, ttl_ms, rec.id,
            rec.data, rec.title, rec.turns, rec.template, rec.owner, f"{self.prefix}owner:",
        ]
        version, detail = self._call(f"save session {rec.id}", self._save, keys=keys, args=args)
        if version == -1:
            raise StoreConflict(rec.id, expected=expected_version, actual=int(detail))
        return int(version)

    def load(self, session_id: str) -> dict[str, Any] | None:
        data, version = self._call(
            f"load session {session_id}", self._client.hmget, self._key(session_id), "data", "version"
        )
        return None if data is None else loaded(data, int(version), session_id)

    def version(self, session_id: str) -> int:
        version = self._call(f"read session {session_id}", self._client.hget, self._key(session_id), "version")
        return int(version or 0)

    def delete(self, session_id: str) -> None:
        self._call(
            f"delete session {session_id}", self._delete,
            keys=[self._key(session_id), f"{self.prefix}index"], args=[session_id, f"{self.prefix}owner:"],
        )

    def list(self, limit: int = 50, *, owner: str | None = None) -> list[SessionInfo]:
        index = f"{self.prefix}index" if owner is None else f"{self.prefix}owner:{owner}"
        infos: list[SessionInfo] = []
        seen: set[str] = set()  # a session saved while we page moves up and could come again
        start = 0
        while len(infos) < limit:
            ids = self._call("list sessions", self._client.zrevrange, index, start, start + limit - 1)
            if not ids:
                break
            start += len(ids)
            pipe = self._client.pipeline(transaction=False)
            for sid in ids:
                pipe.hmget(self._key(sid), *_FIELDS)
            expired = []
            for sid, row in zip(ids, self._call("list sessions", pipe.execute)):
                if row[0] is None:  # the hash expired: its id lingers in the sorted sets
                    expired.append(sid)
                    continue
                if sid in seen:
                    continue
                seen.add(sid)
                title, turns, updated, template, version, who = row
                infos.append(SessionInfo(sid, title, int(turns), float(updated), template, int(version), who))
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
