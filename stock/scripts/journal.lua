-- journal.lua: read a bucket's journal of transfers out (see xfer_out.lua)
-- to complete them. Each entry is written again, unchanged: a WAIT after
-- this call then covers the entries, whichever connection wrote them, so
-- that with AckReplicas only transfers the replicas hold are completed.
--
-- KEYS[1] journal  hash
--
-- Returns {id1, entry1, id2, entry2, ...}.
local kv = redis.call('HGETALL', KEYS[1])
for i = 1, #kv, 2 do
  redis.call('HSET', KEYS[1], kv[i], kv[i + 1])
end
return kv
