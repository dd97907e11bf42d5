"""The Redis store's Lua scripts: every write is one script, so its compare-and-set and its effects are atomic.

Per session: a hash ``s:<id>`` (version, token, the base ``data`` with
``base_version``/``base_tag``/``base_chars``, ``patch_chars``, and the columns
``list`` shows) and a list ``p:<id>`` of the patches after the base. Sessions
written before records existed have no ``base_*`` fields: their ``data`` is a
base at their version, and their first append adds the fields.

Scripts take the time from Redis, so replicas with skewed clocks still list in
write order, and set one absolute expiry (``PEXPIREAT``) on every key of a
session, so its hash and its patches expire together.
"""

#: expires KEYS[1..n] ttl ms after the script's time (0: never); t is redis.call('TIME')
_EXPIRE = """
local function expire(keys, ttl, t)
  if tonumber(ttl) > 0 then
    local at = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ttl))
    for _, k in ipairs(keys) do redis.call('PEXPIREAT', k, at) end
  else
    for _, k in ipairs(keys) do redis.call('PERSIST', k) end
  end
end
"""

#: the compare-and-set every write starts with; ARGV[1] expected ('' = any), ARGV[2] token.
#: A retry of the write that made the current version (its token) gets that version back instead of a conflict.
_CHECK = """
local cur = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if not cur then
  return redis.error_reply('the stored version is not a number')
end
if ARGV[1] ~= '' and tonumber(ARGV[1]) ~= cur then
  if cur == tonumber(ARGV[1]) + 1 and redis.call('HGET', KEYS[1], 'token') == ARGV[2] then
    return {cur, 0}
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
"""

#: KEYS: hash, patches, index, owner set. ARGV: expected, token, ttl ms, id, data, title, turns, template, owner,
#: owner-set key prefix, base tag, base chars. Returns {version, 0} or {-1, actual version}.
SAVE = _EXPIRE + _CHECK + """
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'version', v, 'token', ARGV[2], 'data', ARGV[5], 'title', ARGV[6], 'turns', ARGV[7],
           'template', ARGV[8], 'owner', ARGV[9], 'updated_at', now, 'base_version', v, 'base_tag', ARGV[11],
           'base_chars', ARGV[12], 'patch_chars', 0)
expire({KEYS[1]}, ARGV[3], t)
redis.call('ZADD', KEYS[3], now, ARGV[4])
redis.call('ZADD', KEYS[4], now, ARGV[4])
return {v, 0}
"""

#: KEYS: hash, patches, index, owner set. ARGV: expected, token, ttl ms, id, patch, title, turns, template, owner,
#: owner-set key prefix, patch chars, COMPACT_AFTER, COMPACT_FLOOR. Returns {version, 1 when compaction is due} or
#: {-1, actual version}.
APPEND = _EXPIRE + _CHECK + """
if cur == 0 then
  return {-1, 0}
end
if not redis.call('HGET', KEYS[1], 'base_version') then
  redis.call('HSET', KEYS[1], 'base_version', cur, 'base_tag', '', 'patch_chars', 0,
             'base_chars', redis.call('HSTRLEN', KEYS[1], 'data'))
end
redis.call('RPUSH', KEYS[2], ARGV[5])
local chars = redis.call('HINCRBY', KEYS[1], 'patch_chars', ARGV[11])
redis.call('HSET', KEYS[1], 'version', v, 'token', ARGV[2], 'title', ARGV[6], 'turns', ARGV[7],
           'template', ARGV[8], 'owner', ARGV[9], 'updated_at', now)
expire({KEYS[1], KEYS[2]}, ARGV[3], t)
redis.call('ZADD', KEYS[3], now, ARGV[4])
redis.call('ZADD', KEYS[4], now, ARGV[4])
if chars > math.max(tonumber(ARGV[12]) * tonumber(redis.call('HGET', KEYS[1], 'base_chars')), tonumber(ARGV[13])) then
  return {v, 1}
end
return {v, 0}
"""

#: KEYS: hash, patches. ARGV: tag read, version folded up to, new base, new tag, its chars, minus the chars folded.
#: Installs the base only if the one read is still there; patches after the version folded stay. Returns 1 or 0.
COMPACT = """
local h = redis.call('HMGET', KEYS[1], 'version', 'base_version', 'base_tag')
if h[1] and not (tonumber(h[1]) and tonumber(h[2] or h[1])) then
  return redis.error_reply('the stored version is not a number')
end
if not h[1] or (h[3] or '') ~= ARGV[1] or tonumber(h[1]) < tonumber(ARGV[2]) then
  return 0
end
redis.call('LTRIM', KEYS[2], tonumber(ARGV[2]) - tonumber(h[2] or h[1]), -1)
redis.call('HSET', KEYS[1], 'data', ARGV[3], 'base_version', ARGV[2], 'base_tag', ARGV[4], 'base_chars', ARGV[5])
redis.call('HINCRBY', KEYS[1], 'patch_chars', ARGV[6])
return 1
"""

#: KEYS: hash, patches, index; ARGV: id, owner-set key prefix
DELETE = """
local owner = false
if redis.call('TYPE', KEYS[1]).ok == 'hash' then  -- a damaged session (its key of another type) is deleted too
  owner = redis.call('HGET', KEYS[1], 'owner')
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
if owner then
  redis.call('ZREM', ARGV[2] .. owner, ARGV[1])
end
return 1
"""

#: KEYS: a sorted set; ARGV: hash key prefix, then ids whose hashes were found missing.
#: Removes those still missing (one may have been saved again since it was read).
PRUNE = """
for i = 2, #ARGV do
  if redis.call('EXISTS', ARGV[1] .. ARGV[i]) == 0 then
    redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return 1
"""
