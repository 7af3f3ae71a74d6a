-- limit_admit.lua: admit one request of a tenant against its fleet-wide
-- limits, all or nothing: requests per window and tokens per window (each a
-- GCRA: a theoretical arrival time, TAT, that every admission pushes on by
-- its cost times the emission interval), and requests in flight at once.
-- A request is admitted when, after it, no TAT is further ahead of now than
-- the limit's tolerance (or than the request's own cost, for one larger
-- than the tolerance, which then needs an idle bucket), and the tenant's
-- routers hold fewer requests in flight than the limit. Refused: nothing is
-- written. With dry = 1 nothing is ever written (explain).
-- In flight: <base>:cc is a hash router -> requests it holds, <base>:ccl a
-- zset router -> lease expiry (unix ms); a router that died stops counting
-- when its lease expires (limit_lease.lua renews it from the router's
-- ledger), so a crashed router never holds a tenant's places for long.
-- Keys (all of one tenant, one hash tag; docs/state.md):
--   <base>:rq  requests TAT (µs), <base>:tk  tokens TAT (µs), each expiring
--   when its TAT is reached; <base>:cc, <base>:ccl (above).
-- KEYS[1] = <base>:ids (the library's contract; not touched)
-- ARGV[1] = base, ARGV[2] = router_id, ARGV[3] = lease_ms,
-- ARGV[4] = requests interval µs (0: no limit), ARGV[5] = requests
-- tolerance µs, ARGV[6] = tokens interval µs (0: no limit), ARGV[7] =
-- tokens tolerance µs, ARGV[8] = tokens of this request, ARGV[9] = max in
-- flight (0: no limit), ARGV[10] = dry (1: only report).
-- Returns {admitted (1/0), reason (0 none, 1 requests, 2 tokens, 3 in
-- flight), requests TAT - now µs, tokens TAT - now µs (after admission when
-- admitted), wait µs before a retry could pass the rate limits, requests in
-- flight (after admission)}.
-- Complexity: O(routers holding the tenant's requests).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now / 1000)
local router, lease_ms = ARGV[2], tonumber(ARGV[3])
local rq_int, rq_tol = tonumber(ARGV[4]), tonumber(ARGV[5])
local tk_int, tk_tol, cost = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local max_cc, dry = tonumber(ARGV[9]), ARGV[10] == '1'
if not (lease_ms and rq_int and rq_tol and tk_int and tk_tol and cost and max_cc) then
  return redis.error_reply('ERR limit_admit: numeric arguments expected')
end
local rq_key, tk_key = BASE .. ':rq', BASE .. ':tk'
local cc_key, ccl_key = BASE .. ':cc', BASE .. ':ccl'
local reason, wait = 0, 0

-- One GCRA check: the TAT now (at least now), the TAT after admitting
-- `c`, and the wait before that would conform (0: conforms now).
local function gcra(key, interval, tol, c)
  local tat = tonumber(redis.call('GET', key) or '0') or 0
  if tat < now then tat = now end
  local after = tat + c * interval
  local allowed = math.max(tol, c * interval)
  local over = after - now - allowed
  if over < 0 then over = 0 end
  return tat, after, over
end

local rq_tat, rq_after, tk_tat, tk_after = now, now, now, now
if rq_int > 0 then
  local over
  rq_tat, rq_after, over = gcra(rq_key, rq_int, rq_tol, 1)
  if over > 0 then reason = 1; wait = over end
end
if tk_int > 0 then
  local over
  tk_tat, tk_after, over = gcra(tk_key, tk_int, tk_tol, cost)
  if over > 0 then
    if reason == 0 then reason = 2 end
    if over > wait then wait = over end
  end
end
local held = 0
if max_cc > 0 then
  if not dry then
    local expired = redis.call('ZRANGEBYSCORE', ccl_key, '-inf', now_ms, 'LIMIT', 0, 16)
    for _, r in ipairs(expired) do
      redis.call('HDEL', cc_key, r)
      redis.call('ZREM', ccl_key, r)
    end
  end
  local live = {}
  for _, r in ipairs(redis.call('ZRANGEBYSCORE', ccl_key, string.format('(%d', now_ms), '+inf')) do live[r] = true end
  local all = redis.call('HGETALL', cc_key)
  for i = 1, #all, 2 do
    if live[all[i]] then held = held + (tonumber(all[i + 1]) or 0) end
  end
  if held >= max_cc and reason == 0 then reason = 3 end
end
if reason ~= 0 or dry then
  return { 0 + (reason == 0 and 1 or 0), reason, math.floor(rq_tat - now), math.floor(tk_tat - now), math.floor(wait), held }
end

-- Admitted: write each limit that applies.
local function keep(key, tat)
  redis.call('SET', key, string.format('%d', tat), 'PX', math.floor((tat - now) / 1000) + 1)
end
if rq_int > 0 then keep(rq_key, rq_after) end
if tk_int > 0 then keep(tk_key, tk_after) end
if max_cc > 0 then
  redis.call('HINCRBY', cc_key, router, 1)
  redis.call('ZADD', ccl_key, now_ms + lease_ms, router)
  redis.call('PEXPIRE', cc_key, 2 * lease_ms)
  redis.call('PEXPIRE', ccl_key, 2 * lease_ms)
  held = held + 1
end
return { 1, 0, math.floor(rq_after - now), math.floor(tk_after - now), 0, held }
