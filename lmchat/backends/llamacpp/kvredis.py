"""A KV tier in Redis (``--kv-shared redis://HOST:PORT/DB``): the disk tier's files (:mod:`.kvformat`, checked the
same way before use: identity, MAC under the replicas' one key, ids) as binary values every replica reads.

Per file ``NAME`` (a digest of its ids): a hash ``PREFIX m:NAME`` (``head``: the file's first bytes, its header
and ids, which is all an index reads; ``size``; ``gen``; ``chunks``) and its bytes in chunks of :data:`CHUNK`,
``PREFIX c:NAME:GEN:I`` (a state of 2,000 tokens of the bundled model is 45 MB; Redis takes at most 512 MB a
value, and one command of that size would hold every other client). A zset ``PREFIX names`` orders the files
by last use, and ``PREFIX bytes`` counts their bytes.

Publishing writes the chunks under a fresh generation, then one script makes them the file's (the meta, the
zset, the count) and removes the previous generation's chunks and, least recently used first, whole files until
the tier is within its budget: a reader sees the old file or the new one, or -- a chunk removed while it was
reading (replaced, evicted) -- a file that is gone, a miss that says so. Nothing torn is ever loaded: the MAC
covers the whole file. Use a Redis of its own or a database with no ``maxmemory`` eviction: Redis evicting a
chunk is a miss, evicting a session is a loss.
"""
from __future__ import annotations

import contextlib
import secrets
import time

from .kvdir import Parts
from .kvformat import HEAD, MAX_HEADER, Header, KVFileRejected, parse_header

#: bytes a chunk holds
CHUNK = 4 << 20
#: a chunk expires unless its file is published (then it persists): what a writer that died mid-write leaves
ORPHAN_SECONDS = 3600

#: KEYS[1] the meta, KEYS[2] the zset, KEYS[3] the byte count; ARGV: name, gen, chunks, size, head, budget, prefix.
#: Makes the new generation's chunks (written with an expiry) the file's, removes the old one's chunks and the least
#: recently used files beyond the budget (never this one); returns the names removed.
PUBLISH = """
local function drop(prefix, name)
  local m = prefix .. 'm:' .. name
  local old = redis.call('HMGET', m, 'gen', 'chunks', 'size')
  if old[1] then
    for i = 0, tonumber(old[2]) - 1 do redis.call('DEL', prefix .. 'c:' .. name .. ':' .. old[1] .. ':' .. i) end
    redis.call('DECRBY', KEYS[3], tonumber(old[3]))
  end
  redis.call('DEL', m)
  redis.call('ZREM', KEYS[2], name)
end
local t = redis.call('TIME')
local prefix = ARGV[7]
drop(prefix, ARGV[1])
for i = 0, tonumber(ARGV[3]) - 1 do
  if redis.call('PERSIST', prefix .. 'c:' .. ARGV[1] .. ':' .. ARGV[2] .. ':' .. i) == 0
     and redis.call('EXISTS', prefix .. 'c:' .. ARGV[1] .. ':' .. ARGV[2] .. ':' .. i) == 0 then
    return redis.error_reply('a chunk of the state expired before it was published')
  end
end
redis.call('HSET', KEYS[1], 'gen', ARGV[2], 'chunks', ARGV[3], 'size', ARGV[4], 'head', ARGV[5])
redis.call('ZADD', KEYS[2], tonumber(t[1]) + tonumber(t[2]) / 1e6, ARGV[1])
local total = redis.call('INCRBY', KEYS[3], tonumber(ARGV[4]))
local gone = {}
while total > tonumber(ARGV[6]) do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 1)
  local victim = oldest[1]
  if victim == ARGV[1] then victim = oldest[2] end
  if not victim then break end
  drop(prefix, victim)
  table.insert(gone, victim)
  total = tonumber(redis.call('GET', KEYS[3]) or '0')
end
return gone
"""

#: KEYS[1] the zset, KEYS[2] the byte count; ARGV: name, prefix. Removes the file.
DROP = """
local m = ARGV[2] .. 'm:' .. ARGV[1]
local old = redis.call('HMGET', m, 'gen', 'chunks', 'size')
if old[1] then
  for i = 0, tonumber(old[2]) - 1 do redis.call('DEL', ARGV[2] .. 'c:' .. ARGV[1] .. ':' .. old[1] .. ':' .. i) end
  redis.call('DECRBY', KEYS[2], tonumber(old[3]))
end
redis.call('DEL', m)
redis.call('ZREM', KEYS[1], ARGV[1])
return 0
"""


class RedisFiles:
    """KV files in the Redis at ``url`` under ``prefix``, at most ``budget`` bytes of them (the replicas' one
    budget, kept by Redis). Its errors are OSError (writes, listing) or misses (reads)."""

    def __init__(self, url: str, budget: int, prefix: str = "lmchat:kv:", timeout: float = 5.0) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.where = _masked(url)
        self.prefix, self.budget = prefix, int(budget)
        self._error = redis.RedisError
        # one immediate retry reconnects after a Redis restart (pooled sockets are dead then)
        self._client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                            retry=Retry(NoBackoff(), 1))
        self._publish = self._client.register_script(PUBLISH)
        self._drop = self._client.register_script(DROP)

    def _key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    def names(self) -> list[str]:
        try:
            return [_bytes(n).decode("ascii", "replace") for n in self._client.zrange(self._key("names"), 0, -1)]
        except self._error as exc:
            raise OSError(f"Redis at {self.where}: {exc}") from None

    def _meta(self, name: str) -> tuple[bytes, int, bytes, int]:
        try:
            gen, chunks, head, size = self._client.hmget(self._key("m", name), "gen", "chunks", "head", "size")
        except self._error as exc:
            raise KVFileRejected(f"could not be read (Redis at {self.where}: {exc})", "unavailable") from None
        if gen is None:
            raise KVFileRejected("was removed before it could be read (evicted by the shared tier's budget or "
                                 "replaced)", "gone")
        try:
            return _bytes(gen), int(_bytes(chunks)), _bytes(head or b""), int(_bytes(size))
        except ValueError:
            raise KVFileRejected("has a record that is not valid", "corrupt") from None

    def head(self, name: str, max_ids: int) -> tuple[Header, bytes | None, int, float]:
        _, _, head, size = self._meta(name)
        header = parse_header(memoryview(head)[:HEAD.size + MAX_HEADER], size)
        if len(head) < header.size + 4 * header.n_ids:
            raise KVFileRejected("is truncated", "truncated")
        raw = bytes(head[header.size:header.size + 4 * header.n_ids]) if header.n_ids <= max_ids else None
        try:
            score = self._client.zscore(self._key("names"), name)
        except self._error:
            score = None
        return header, raw, size, float(score or 0.0)

    def read(self, name: str, limit: int) -> bytearray:
        gen, chunks, _, size = self._meta(name)
        if size > limit:
            raise KVFileRejected(f"is larger than the whole shared tier ({limit} bytes)", "too large")
        keys = [self._key("c", name, gen.decode("ascii", "replace"), str(i)) for i in range(chunks)]
        data = bytearray()
        try:
            for start in range(0, len(keys), 8):  # a few chunks a command: other clients are served between
                for part in self._client.mget(keys[start:start + 8]):
                    if part is None:
                        raise KVFileRejected("was removed while it was read (evicted by the shared tier's "
                                             "budget or replaced)", "gone")
                    data += _bytes(part)
                    if len(data) > size:
                        raise KVFileRejected("is longer than its record says", "truncated")
            self._client.zadd(self._key("names"), {name: time.time()}, xx=True)  # used: the last to go
        except self._error as exc:
            raise KVFileRejected(f"could not be read (Redis at {self.where}: {exc})", "unavailable") from None
        except ValueError:
            raise KVFileRejected("has a chunk that is not valid", "corrupt") from None
        if len(data) != size:
            raise KVFileRejected("is truncated", "truncated")
        return data

    def write(self, name: str, parts: Parts) -> None:
        gen = secrets.token_hex(8)
        buffer, head, n, size = bytearray(), b"", 0, 0
        try:
            pipe = self._client.pipeline(transaction=False)
            for part in parts:
                buffer += part
                size += len(part)
                if not head and len(buffer) >= HEAD.size + MAX_HEADER:
                    head = bytes(buffer[:HEAD.size + MAX_HEADER])
                while len(buffer) >= CHUNK:
                    pipe.set(self._key("c", name, gen, str(n)), bytes(buffer[:CHUNK]), ex=ORPHAN_SECONDS)
                    del buffer[:CHUNK]
                    n += 1
                    pipe.execute()
            if buffer:
                pipe.set(self._key("c", name, gen, str(n)), bytes(buffer), ex=ORPHAN_SECONDS)
                n += 1
            pipe.execute()
            head = head or bytes(buffer)
            header = parse_header(memoryview(head)[:HEAD.size + MAX_HEADER], size)
            head = head[:header.size + 4 * header.n_ids] if len(head) >= header.size + 4 * header.n_ids \
                else self._first(name, gen, header.size + 4 * header.n_ids)
            self._publish(keys=[self._key("m", name), self._key("names"), self._key("bytes")],
                          args=[name, gen, n, size, head, self.budget, self.prefix])
        except self._error as exc:
            self._forget(name, gen, n)
            raise OSError(f"Redis at {self.where}: {exc}") from None

    def _first(self, name: str, gen: str, n: int) -> bytes:
        """The first ``n`` bytes of a file just written (a header with more ids than the first buffer held)."""
        out = bytearray()
        i = 0
        while len(out) < n:
            part = self._client.get(self._key("c", name, gen, str(i)))
            if part is None:
                break
            out += _bytes(part)
            i += 1
        return bytes(out[:n])

    def _forget(self, name: str, gen: str, n: int) -> None:
        with contextlib.suppress(self._error):
            self._client.delete(*[self._key("c", name, gen, str(i)) for i in range(n + 1)])

    def delete(self, name: str) -> None:
        with contextlib.suppress(self._error):
            self._drop(keys=[self._key("names"), self._key("bytes")], args=[name, self.prefix])

    def sweep(self) -> None:
        """Nothing: the chunks of a write cut short expire (:data:`ORPHAN_SECONDS`)."""

    def close(self) -> None:
        self._client.close()


def _bytes(value: object) -> bytes:
    """A value as this client reads it (binary: no ``decode_responses``); ValueError for anything else."""
    if not isinstance(value, bytes):
        raise ValueError(f"not bytes: {type(value).__name__}")
    return value


def _masked(url: str) -> str:
    """``url`` without its password (it appears in logs and stats)."""
    head, sep, rest = url.partition("://")
    if "@" not in rest:
        return url
    auth, _, host = rest.rpartition("@")
    user = auth.split(":", 1)[0]
    return f"{head}{sep}{user + ':***' if ':' in auth else '***'}@{host}"
