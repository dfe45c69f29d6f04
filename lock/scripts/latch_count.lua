-- latch_count.lua: the count of a countdown latch. (core.lua and lib.lua
-- come first; their lock keys are not this script's.)
--
-- KEYS[1]  L, the latch (see latch_set.lua)
--
-- Returns the count: 0 when the latch is open or was never set.

return tonumber(redis.call('hget', KEYS[1], 'c') or '0')
