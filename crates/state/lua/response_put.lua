-- response_put.lua: admit one response to the response cache of a model's
-- part, within the part's byte budget. Entries expire by their TTL; the
-- budget counts an entry until its expiry, and each call first drops the
-- accounting of entries already expired (at most 64 per call).
-- Keys (built from BASE, so one slot; docs/state.md):
--   <base>:rc:<key>   the entry (string, PX ttl), read with a plain GET
--   <base>:rc_expiry  zset: key -> expiry (unix ms)
--   <base>:rc_sizes   hash: key -> the entry's bytes
--   <base>:rc_used    string: the bytes rc_sizes counts
-- The three index keys get the TTL of the latest entry (never a shorter
-- one), so a cache nobody writes to any more leaves no key behind.
-- KEYS[1] = <base>:ids (the library's contract; not touched)
-- ARGV[1] = base, ARGV[2] = key (64 lower-case hex digits), ARGV[3] = the
-- entry's bytes, ARGV[4] = ttl_ms (> 0), ARGV[5] = the part's budget in bytes.
-- Returns 1 when stored, 0 when a live entry already holds the key (left as
-- it is: identical requests answer identically), -1 when the entry does not
-- fit in what is left of the budget (not stored).
-- Complexity: O(log N) for N entries of the part, plus O(log N) per expired
-- entry dropped (at most 64).
local key, value = ARGV[2], ARGV[3]
local ttl_ms, budget = tonumber(ARGV[4]), tonumber(ARGV[5])
if #key ~= 64 or sfind(key, '[^0-9a-f]') then
  return redis.error_reply('ERR response cache key must be 64 hex digits')
end
if not ttl_ms or ttl_ms <= 0 or not budget then
  return redis.error_reply('ERR response cache ttl and budget must be numbers')
end
local entry = BASE .. ':rc:' .. key
local expiry_key, sizes_key, used_key = BASE .. ':rc_expiry', BASE .. ':rc_sizes', BASE .. ':rc_used'
if redis.call('EXISTS', entry) == 1 then return 0 end

local now = now_ms()
local used = tonumber(redis.call('GET', used_key) or '0') or 0
-- Forgets one entry's accounting (expired, or evicted under maxmemory).
local function forget(k)
  used = used - (tonumber(redis.call('HGET', sizes_key, k) or '0') or 0)
  redis.call('HDEL', sizes_key, k)
  redis.call('ZREM', expiry_key, k)
end
local expired = redis.call('ZRANGEBYSCORE', expiry_key, '-inf', now, 'LIMIT', 0, 64)
for _, k in ipairs(expired) do forget(k) end
-- The key's own accounting, left by an entry that is gone.
if redis.call('ZSCORE', expiry_key, key) then forget(key) end
if used < 0 then used = 0 end

local admitted = used + #value <= budget
if admitted then
  redis.call('SET', entry, value, 'PX', ttl_ms)
  redis.call('ZADD', expiry_key, now + ttl_ms, key)
  redis.call('HSET', sizes_key, key, #value)
  used = used + #value
end
if redis.call('ZCARD', expiry_key) == 0 then
  redis.call('DEL', expiry_key, sizes_key, used_key)
else
  redis.call('SET', used_key, string.format('%d', used), 'KEEPTTL')
  for _, k in ipairs({ expiry_key, sizes_key, used_key }) do
    if redis.call('PTTL', k) < ttl_ms then redis.call('PEXPIRE', k, ttl_ms) end
  end
end
if admitted then return 1 end
return -1
