-- retire.lua: delete every key of an activity (of one bucket of it) that
-- ended at least the retention ago, once no order of it waits in its
-- stream. Nothing can be
-- added to the stream after the end (grab.lua refuses by the same clock),
-- so the caller's check that nothing is undelivered stays true; this script
-- checks again that nothing is delivered and unacknowledged.
--
-- KEYS[1] meta  KEYS[2] buyers  KEYS[3] orders  KEYS[4] debt
-- KEYS[5] returned  KEYS[6] journal  KEYS[7] credits (of a bucket, see
-- borrow.go)  KEYS[8] the stock string of releases before the stock moved
-- into meta (see load.lua), when they left one
-- ARGV[1] consumer group  ARGV[2] the activity's end, unix ms
-- ARGV[3] retention in ms
--
-- Returns 1 if the keys are gone (now or before), 0 if it is too early or
-- orders are still pending.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if now < tonumber(ARGV[2]) + tonumber(ARGV[3]) then
  return 0
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  local ok, p = pcall(redis.call, 'XPENDING', KEYS[3], ARGV[1])
  if ok and tonumber(p[1]) > 0 then
    return 0
  end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
return 1
