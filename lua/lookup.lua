-- lookup.lua: read-only prefix match of a chain of blocks against live workers.
-- KEYS[1] = <base>:ids
-- ARGV[1] = base, ARGV[2..] = the request's block hashes in chain order.
-- For each live worker: the number of leading blocks of the chain it holds,
-- plus its load. The scan stops at the first block no remaining worker holds.
-- Returns {blocks scanned, then per worker 11 strings: matched blocks, then
-- worker_info's 10 fields (see lib.lua)}.
-- Complexity: O(matched blocks x live workers holding them + live workers);
-- callers send at most 256 hashes per call.
local bad = check_hashes(2)
if bad then return bad end
local now = now_ms()
local live = live_leases(now)
local states, matched, active = {}, {}, {}
for i = 1, #live / 2 do
  states[i] = worker_state(live[2 * i - 1])
  matched[i] = 0
  active[i] = i
end
local scanned = 0
for n = 2, #ARGV do
  if #active == 0 then break end
  local h = ARGV[n]
  scanned = scanned + 1
  local v = fwd_read(h)
  local still = {}
  for _, i in ipairs(active) do
    if holds(v, states[i], h, now) then
      matched[i] = n - 1
      still[#still + 1] = i
    end
  end
  active = still
end
local routers = live_routers(now)
local out = { tostring(scanned) }
for i = 1, #live / 2 do
  out[#out + 1] = tostring(matched[i])
  for _, v in ipairs(worker_info(live[2 * i - 1], tonumber(live[2 * i]), now, routers)) do
    out[#out + 1] = v
  end
end
return out
