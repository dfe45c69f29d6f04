-- load.lua: make an activity available for grabs, unless it already is.
-- Buyers are written beforehand (in chunks, HSET); this script is the last
-- step, so a half-loaded activity is never visible: without meta, grab.lua
-- answers "not loaded".
--
-- KEYS[1] meta     hash   (see grab.lua)
-- KEYS[2] the string where releases before this layout kept the stock:
--         a sale Redis held across the upgrade has meta without left,
--         which grab.lua answers "not loaded"; this call moves that stock
--         into meta
-- KEYS[3] orders   stream
-- KEYS[4] returned set   the receipts of return.lua
-- KEYS[5] the receipts of the returns the database snapshot holds, staged
--         beforehand (in chunks) under a key of this load's own. They
--         become the receipt set only if this call loads the activity:
--         receipts from a snapshot that the loaded stock does not reflect
--         would make return.lua skip units it owes.
-- ARGV[1] starts_ms  ARGV[2] ends_ms  ARGV[3] stock  ARGV[4] remaining
-- ARGV[5] consumer group name
-- ARGV[6] the highest local order id the activity is known to have used
--         (in the database, among the buyers), "0" if none
-- ARGV[7], ARGV[8] the bucket's transfer counters in and out (see
--         borrow.go), "0" but for a bucket loaded while others are held
--
-- The staged receipts replace any receipt set left from before: Redis lost
-- the activity, and the snapshot holds every return committed before it.
--
-- Order ids (see grab.lua) continue past ARGV[6] and past the last entry id
-- the stream generated, if the stream outlived the rest (XADD refuses an id
-- not above it, deleted entries included). The epoch, which compensate.lua,
-- reconcile.lua and return.lua advance whenever they change the buyers
-- while the stock may be 0, starts at a fresh value, Redis' clock in
-- microseconds: an instance that holds a snapshot of the buyers taken
-- before the activity was lost sees another epoch and drops it.
--
-- Returns 1 if this call loaded the activity, 0 if it was loaded already.
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[5])
  if redis.call('HEXISTS', KEYS[1], 'left') == 0 then
    redis.call('HINCRBY', KEYS[1], 'left', tonumber(redis.call('GET', KEYS[2]) or '0'))
    redis.call('DEL', KEYS[2])
  end
  return 0
end
if redis.call('EXISTS', KEYS[5]) == 1 then
  redis.call('RENAME', KEYS[5], KEYS[4])
  redis.call('PERSIST', KEYS[4])
else
  redis.call('DEL', KEYS[4])
end
local starts = tonumber(ARGV[1])
local seq = tonumber(ARGV[6])
if redis.call('EXISTS', KEYS[3]) == 1 then
  local info = redis.call('XINFO', 'STREAM', KEYS[3])
  for i = 1, #info - 1, 2 do
    if info[i] == 'last-generated-id' and type(info[i + 1]) == 'string' then
      local ms, n = string.match(info[i + 1], '^(%d+)-(%d+)$')
      if ms then
        seq = math.max(seq, (tonumber(ms) - starts) * 8 + math.min(tonumber(n), 7))
      end
    end
  end
end
local ok = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[3], ARGV[5], '0', 'MKSTREAM')
-- BUSYGROUP (the group exists) is fine: its pending entries are kept.
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'starts_ms', ARGV[1], 'ends_ms', ARGV[2], 'stock', ARGV[3], 'left', ARGV[4],
  'seq', string.format('%d', seq), 'epoch', string.format('%d', t[1] * 1000000 + t[2]))
if ARGV[7] ~= '0' or ARGV[8] ~= '0' then
  redis.call('HSET', KEYS[1], 'in', ARGV[7], 'out', ARGV[8])
end
return 1
