-- grab.lua: try a batch of grabs of one activity in one atomic step: the
-- grabs of one or more of its buckets (groups), each group on the keys of
-- its bucket. On Redis Cluster a call holds one group (one hash tag); on a
-- single Redis it holds the batch of every bucket (see combiner.go).
--
-- KEYS, three a group:
-- KEYS[1] meta    hash   starts_ms, ends_ms, stock, left (the remaining
--                 stock), seq (the last order's local id), epoch (see
--                 load.lua), awake: set while a worker reads the stream.
--                 When a grab is accepted and awake is absent, this script
--                 sets it and publishes the group's wake-up message on
--                 ARGV[1], waking the workers: one message per idle-to-busy
--                 change, none under load. One HMGET reads and one HSET
--                 writes what a group needs of it: an activity of many
--                 buckets on one Redis pays them for each group of a call.
-- KEYS[2] buyers  hash   <uid> -> <local id of the user's order>
-- KEYS[3] orders  stream one entry per accepted grab: o=<local id> u=<uid>,
--                 under the entry id <starts_ms + (local >> 3)>-<local & 7>:
--                 its milliseconds are the time of the grab (later when ids
--                 borrow), and an order's entry is found from its id alone
-- ARGV[1] the workers' wake-up channel
-- ARGV[2] "1" if a WAIT follows this call (the engine's AckReplicas), else "0"
-- ARGV[3] the activity's number of buckets n
-- then, a group after the other: the bucket b; its wake-up message (the
-- activity id, and "/<b>" with several buckets); the number of its grabs;
-- the uid of each (decimal strings), whose home bucket b is (bucket.go).
--
-- WAIT covers the writes of its own connection only. With ARGV[2] = "1", a
-- group that takes nothing but answers an existing order (or has no uids
-- at all) rewrites its meta's seq unchanged: that write is replicated after
-- every earlier write, so the WAIT that follows covers the existing orders
-- too, whichever connection wrote them.
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
-- Returns, a group after the other: status, remaining, and with status 0
-- code1, local1, code2, local2, ... (one pair a grab of the group)
--   status: 0 ok (codes follow), 1 not loaded, 2 not started, 3 ended
--   code:   0 new order (local is the new order), 1 the user already has an
--           order (local is that order), 2 sold out (local is "")
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local n = tonumber(ARGV[3])
local out = {}
local pos, k = 4, 0
while pos <= #ARGV do
  local b, msg, count = tonumber(ARGV[pos]), ARGV[pos + 1], tonumber(ARGV[pos + 2])
  local first, last = pos + 3, pos + 2 + count
  pos = last + 1
  local meta = redis.call('HMGET', KEYS[k + 1], 'starts_ms', 'ends_ms', 'seq', 'left', 'awake')
  local remaining = tonumber(meta[4])
  if not meta[1] or not meta[2] or not remaining then
    out[#out + 1] = 1
    out[#out + 1] = 0
  elseif now < tonumber(meta[1]) then
    out[#out + 1] = 2
    out[#out + 1] = remaining
  elseif now >= tonumber(meta[2]) then
    out[#out + 1] = 3
    out[#out + 1] = remaining
  else
    local starts = tonumber(meta[1])
    local seq = tonumber(meta[3]) or 0
    local base = (now - starts) * 8
    out[#out + 1] = 0
    local at = #out + 1 -- remaining, set below
    out[at] = 0
    local taken = 0
    local held = count == 0
    for i = first, last do
      local uid = ARGV[i]
      local id = math.max(seq + 1, base)
      id = id + (b - id) % n
      local idStr = string.format('%d', id)
      -- While stock lasts, one HSETNX both checks and records the buyer.
      if remaining - taken > 0 and redis.call('HSETNX', KEYS[k + 2], uid, idStr) == 1 then
        taken = taken + 1
        seq = id
        local entry = string.format('%d-%d', starts + math.floor(id / 8), id % 8)
        redis.call('XADD', KEYS[k + 3], entry, 'o', idStr, 'u', uid)
        out[#out + 1] = 0
        out[#out + 1] = idStr
      else
        local existing = redis.call('HGET', KEYS[k + 2], uid)
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
      remaining = remaining - taken
      local seqStr, leftStr = string.format('%d', seq), string.format('%d', remaining)
      if meta[5] then
        redis.call('HSET', KEYS[k + 1], 'seq', seqStr, 'left', leftStr)
      else
        redis.call('HSET', KEYS[k + 1], 'seq', seqStr, 'left', leftStr, 'awake', '1')
        redis.call('PUBLISH', ARGV[1], msg)
      end
    elseif held and ARGV[2] == '1' then
      redis.call('HSET', KEYS[k + 1], 'seq', string.format('%d', seq))
    end
    out[at] = remaining
  end
  k = k + 3
end
return out
