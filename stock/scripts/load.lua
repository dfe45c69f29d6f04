-- load.lua: make an activity available for grabs, unless it already is.
-- Buyers are written beforehand (in chunks, HSET); this script is the last
-- step, so a half-loaded activity is never visible: without meta, grab.lua
-- answers "not loaded".
--
-- KEYS[1] meta    hash
-- KEYS[2] stock   string
-- KEYS[3] orders  stream
-- ARGV[1] starts_ms  ARGV[2] ends_ms  ARGV[3] stock  ARGV[4] remaining
-- ARGV[5] consumer group name
--
-- Returns 1 if this call loaded the activity, 0 if it was loaded already.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('SET', KEYS[2], ARGV[4])
local ok = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[3], ARGV[5], '0', 'MKSTREAM')
-- BUSYGROUP (the group exists) is fine: its pending entries are kept.
redis.call('HSET', KEYS[1], 'starts_ms', ARGV[1], 'ends_ms', ARGV[2], 'stock', ARGV[3])
return 1
