-- grab.lua: try a batch of grabs of one activity in one atomic step.
--
-- KEYS[1] meta    hash   starts_ms, ends_ms, stock
-- KEYS[2] stock   string remaining stock
-- KEYS[3] buyers  hash   <uid> -> <oid>
-- KEYS[4] orders  stream one entry per accepted grab: o=<oid> u=<uid>; the
--                 entry id's milliseconds are the time of the grab
-- KEYS[5] awake   string set while a worker reads the stream. When a grab is
--                 accepted and it is absent, this script sets it and
--                 publishes the activity id on ARGV[1], waking the workers:
--                 one message per idle-to-busy change, none under load.
-- ARGV[1] the workers' wake-up channel  ARGV[2] the activity id
-- ARGV[3], ARGV[4]   uid, oid of the first grab; then pairs for the others.
--                    Ids are decimal strings: Lua numbers are doubles and
--                    would round 64-bit ids.
--
-- Returns {status, remaining, code1, oid1, code2, oid2, ...}
--   status: 0 ok (codes follow), 1 not loaded, 2 not started, 3 ended
--   code:   0 new order (oid is the new order), 1 the user already has an
--           order (oid is that order), 2 sold out (oid is "")
local window = redis.call('HMGET', KEYS[1], 'starts_ms', 'ends_ms')
local remaining = tonumber(redis.call('GET', KEYS[2]))
if not window[1] or not window[2] or not remaining then
  return {1, 0}
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if now < tonumber(window[1]) then
  return {2, remaining}
end
if now >= tonumber(window[2]) then
  return {3, remaining}
end

local out = {0, 0}
local taken = 0
for i = 3, #ARGV, 2 do
  local uid, oid = ARGV[i], ARGV[i + 1]
  -- While stock lasts, one HSETNX both checks and records the buyer.
  if remaining - taken > 0 and redis.call('HSETNX', KEYS[3], uid, oid) == 1 then
    taken = taken + 1
    redis.call('XADD', KEYS[4], '*', 'o', oid, 'u', uid)
    out[#out + 1] = 0
    out[#out + 1] = oid
  else
    local existing = redis.call('HGET', KEYS[3], uid)
    if existing then
      out[#out + 1] = 1
      out[#out + 1] = existing
    else
      out[#out + 1] = 2
      out[#out + 1] = ''
    end
  end
end
if taken > 0 then
  remaining = redis.call('DECRBY', KEYS[2], taken)
  if redis.call('SET', KEYS[5], '1', 'NX') then
    redis.call('PUBLISH', ARGV[1], ARGV[2])
  end
end
out[2] = remaining
return out
