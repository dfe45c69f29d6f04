-- grab.lua: try a batch of grabs of one activity in one atomic step.
--
-- KEYS[1] meta    hash   starts_ms, ends_ms, stock, seq (the last order's
--                 local id), epoch (see load.lua)
-- KEYS[2] stock   string remaining stock
-- KEYS[3] buyers  hash   <uid> -> <local id of the user's order>
-- KEYS[4] orders  stream one entry per accepted grab: o=<local id> u=<uid>,
--                 under the entry id <starts_ms + (local >> 3)>-<local & 7>:
--                 its milliseconds are the time of the grab (later when ids
--                 borrow), and an order's entry is found from its id alone
-- KEYS[5] awake   string set while a worker reads the stream. When a grab is
--                 accepted and it is absent, this script sets it and
--                 publishes ARGV[2] on ARGV[1], waking the workers:
--                 one message per idle-to-busy change, none under load.
-- ARGV[1] the workers' wake-up channel  ARGV[2] the wake-up message: the
--         activity id, and "/<bucket>" in an activity of several buckets
-- ARGV[3] "1" if a WAIT follows this call (the engine's AckReplicas), else "0"
-- ARGV[4] the activity's number of buckets n  ARGV[5] this bucket b
-- ARGV[6], ...       the uid of each grab (decimal strings), whose home
--                    bucket this is (see bucket.go)
--
-- WAIT covers the writes of its own connection only. With ARGV[3] = "1", a
-- call that takes nothing but answers an existing order (or has no uids at
-- all) rewrites meta's seq unchanged: that write is replicated after every
-- earlier write, so the WAIT that follows covers the existing orders too,
-- whichever connection wrote them.
--
-- Order ids are issued here, per bucket: local = the first id at or above
-- max(seq + 1, (now - starts_ms) << 3) that is b modulo n (with one
-- bucket, that id itself), 36 bits of milliseconds and 3 of sequence; more
-- orders in a millisecond than it has ids for borrow from the next one, so
-- locals only grow and so do the entry ids (XADD refuses an id not above
-- the last). The buckets' ids never meet, and name their bucket.
-- The caller prefixes the activity id (seckill.OrderID). Every number this
-- script handles stays below 2^53, exact in a Lua double, and goes out as
-- a decimal string made by string.format('%d'): Redis' Lua 5.1 would turn
-- a number above 10^14 into "1.2345678901235e+14".
--
-- Returns {status, remaining, code1, local1, code2, local2, ...}
--   status: 0 ok (codes follow), 1 not loaded, 2 not started, 3 ended
--   code:   0 new order (local is the new order), 1 the user already has an
--           order (local is that order), 2 sold out (local is "")
local meta = redis.call('HMGET', KEYS[1], 'starts_ms', 'ends_ms', 'seq')
local remaining = tonumber(redis.call('GET', KEYS[2]))
if not meta[1] or not meta[2] or not remaining then
  return {1, 0}
end
local starts = tonumber(meta[1])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if now < starts then
  return {2, remaining}
end
if now >= tonumber(meta[2]) then
  return {3, remaining}
end

local seq = tonumber(meta[3]) or 0
local base = (now - starts) * 8
local n, b = tonumber(ARGV[4]), tonumber(ARGV[5])
local out = {0, 0}
local taken = 0
local held = #ARGV == 5
for i = 6, #ARGV do
  local uid = ARGV[i]
  local id = math.max(seq + 1, base)
  id = id + (b - id) % n
  local idStr = string.format('%d', id)
  -- While stock lasts, one HSETNX both checks and records the buyer.
  if remaining - taken > 0 and redis.call('HSETNX', KEYS[3], uid, idStr) == 1 then
    taken = taken + 1
    seq = id
    local entry = string.format('%d-%d', starts + math.floor(id / 8), id % 8)
    redis.call('XADD', KEYS[4], entry, 'o', idStr, 'u', uid)
    out[#out + 1] = 0
    out[#out + 1] = idStr
  else
    local existing = redis.call('HGET', KEYS[3], uid)
    if existing then
      held = true
      out[#out + 1] = 1
      out[#out + 1] = existing
    else
      out[#out + 1] = 2
      out[#out + 1] = ''
    end
  end
end
if taken > 0 then
  redis.call('HSET', KEYS[1], 'seq', string.format('%d', seq))
  remaining = redis.call('DECRBY', KEYS[2], taken)
  if redis.call('SET', KEYS[5], '1', 'NX') then
    redis.call('PUBLISH', ARGV[1], ARGV[2])
  end
elseif held and ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'seq', string.format('%d', seq))
end
out[2] = remaining
return out
