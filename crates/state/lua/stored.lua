-- stored.lua: the worker confirms that it now caches these blocks, with the
-- best tier it holds them on.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2] = worker_id, ARGV[3] = confirmed ttl_ms,
-- ARGV[4] = the tier, as an entry kind: 'c' GPU, 'h' CPU, 'd' disk;
-- ARGV[5..] = block hashes (16 lower-case hex digits).
-- Inserts missing entries and promotes speculative ones, with the confirmed
-- TTL; confirmed entries get their expiry refreshed and take the tier given
-- (a block demoted to the CPU, or loaded back onto the GPU, is reported
-- again with its new tier). A non-GPU tier marks the worker record
-- `tiered`, so that a full sync compares tiers (sync_patch.lua).
-- Digests (dg:<idx>) follow the confirmed membership and its tiers: a
-- joining hash is XORed in with the tier, a tier change swaps the two
-- tiers' terms; during a sync, against the target s:<idx> and its tiers
-- st:<idx>, which take the new tier too. A hash listed twice counts once.
-- (The work is store_blocks, lib_blocks.lua.)
-- Returns {inserted, promoted, refreshed}, or the error "ERR unknown worker".
-- Complexity: O(n) for n hashes; one forward read and write per hash (one
-- bucket key, one entry search), set and digest updates batched. Callers
-- send at most 64 hashes per call.
local tier = ARGV[4]
if not CONFIRMED[tier] then return redis.error_reply("ERR the tier must be 'c', 'h' or 'd'") end
local bad = check_hashes(5)
if bad then return bad end
local now = now_ms()
local idx = live_idx(ARGV[2], now)
if not idx then return redis.error_reply('ERR unknown worker') end
local joined = {}
local inserted, promoted, refreshed =
  store_blocks(idx, worker_state(idx), unique_args(5), tier, expiry_s(now, tonumber(ARGV[3])), joined)
digest_flush(digest_key(idx), joined)
return { inserted, promoted, refreshed }
