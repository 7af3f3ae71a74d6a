-- apply_events.lua: one flush of a worker's reports, its stored and evicted
-- blocks in the order the worker saw them, applied atomically.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3] = confirmed ttl_ms,
-- ARGV[4..] = groups, each an op, a count n, then n block hashes (16
-- lower-case hex digits): op 'c', 'h' or 'd' = stored on that tier (GPU,
-- CPU, disk: stored.lua's ARGV[4]), 'e' = evicted (evict.lua).
-- Every group is checked before any is applied (a malformed call writes
-- nothing); then each is applied in turn as stored.lua or evict.lua would
-- (store_blocks, evict_blocks: lib_blocks.lua), so a block evicted then
-- stored again in one call ends stored, and the digests are written once.
-- A hash listed twice in one group counts once. No groups: only the
-- worker's check.
-- Returns {inserted, promoted, refreshed, removed} summed over the groups,
-- or the error "ERR unknown worker".
-- Complexity: O(n + g) for n hashes in g groups: stored.lua's and
-- evict.lua's work per hash, one digest read and write for the call.
-- Callers send at most 64 hashes per call.
local groups, i = {}, 4
while i <= #ARGV do
  local op, n = ARGV[i], tonumber(ARGV[i + 1] or '')
  if not (op == 'e' or CONFIRMED[op]) then
    return redis.error_reply("ERR bad op at ARGV[" .. i .. "]: 'c', 'h', 'd' or 'e'")
  end
  if not n or n < 0 or n % 1 ~= 0 or i + 1 + n > #ARGV then
    return redis.error_reply('ERR bad count at ARGV[' .. (i + 1) .. ']')
  end
  for j = i + 2, i + 1 + n do
    if not valid_hash(ARGV[j]) then
      return redis.error_reply('ERR bad block hash at ARGV[' .. j .. ']')
    end
  end
  groups[#groups + 1] = { op, i + 2, i + 1 + n }
  i = i + 2 + n
end
local now = now_ms()
local idx = live_idx(ARGV[2], now)
if not idx then return redis.error_reply('ERR unknown worker') end
local ws = worker_state(idx)
local exp = expiry_s(now, tonumber(ARGV[3]))
local acc = {}
local inserted, promoted, refreshed, removed = 0, 0, 0, 0
for _, g in ipairs(groups) do
  local hashes = unique_args(g[2], g[3])
  if g[1] == 'e' then
    removed = removed + evict_blocks(idx, ws, hashes, acc)
  else
    local a, b, c = store_blocks(idx, ws, hashes, g[1], exp, acc)
    inserted, promoted, refreshed = inserted + a, promoted + b, refreshed + c
  end
end
digest_flush(digest_key(idx), acc)
return { inserted, promoted, refreshed, removed }
