-- reconcile.lua: teach Redis about orders the database confirmed but Redis
-- does not know: a worker committed a batch read from a stream that Redis
-- has since lost (a restart without persistence), after the activity was
-- rebuilt from a database snapshot taken before that commit. Idempotent:
-- the buyer mark is the receipt.
--
-- KEYS[1] meta    hash   loaded? and left (the stock), seq, epoch (see
--                 grab.lua, load.lua)
-- KEYS[2] buyers  hash
-- KEYS[3] debt    string units taken while the stock was 0, owed by the
--                 next compensations (see compensate.lua)
-- KEYS[4] returned set   receipts of return.lua: an order whose unit came
--                 back is not taken again, whatever the caller read of it
--                 before it was cancelled or expired
-- ARGV: uid1, local1, uid2, local2, ... (confirmed orders, local ids in
--       decimal)
--
-- Order ids are issued past the given ones from now on (they may come from
-- a lost stream). A mark added or changed moves the epoch, so that
-- instances holding a snapshot of the buyers drop it.
--
-- Returns -1 if the activity is not loaded, else the units taken.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local taken, changed = 0, 0
local seq = tonumber(redis.call('HGET', KEYS[1], 'seq')) or 0
local top = seq
for i = 1, #ARGV, 2 do
  local uid, oid = ARGV[i], ARGV[i + 1]
  top = math.max(top, tonumber(oid))
  local mark = redis.call('HGET', KEYS[2], uid)
  if mark ~= oid and redis.call('SISMEMBER', KEYS[4], oid) == 0 then
    redis.call('HSET', KEYS[2], uid, oid)
    changed = changed + 1
    -- A user Redis did not know takes a unit now. A user who grabbed
    -- again meanwhile already took one, under an order the database will
    -- refuse as a duplicate of this one: that unit is this order's.
    if not mark then
      taken = taken + 1
      if tonumber(redis.call('HGET', KEYS[1], 'left') or '0') > 0 then
        redis.call('HINCRBY', KEYS[1], 'left', -1)
      else
        -- Redis sold this unit to a grab the database will refuse for
        -- lack of stock; that refusal pays the debt instead of restocking.
        redis.call('INCR', KEYS[3])
      end
    end
  end
end
if top > seq then
  redis.call('HSET', KEYS[1], 'seq', string.format('%d', top))
end
if changed > 0 then
  redis.call('HINCRBY', KEYS[1], 'epoch', 1)
end
return taken
