-- cancel.lua: a waiter gives up: leave the line, and release the lock if it
-- was given the lock meanwhile. (core.lua comes first: it describes the keys.)
--
-- KEYS     K, F, Q, W (see core.lua)
-- ARGV[1]  hold token
-- ARGV[2]  '0' for Redlock, default '1'
-- ARGV[3]  chanbase: the channel of a client is chanbase .. its id
--
-- Returns 0 when it only waited, 1 or 2 when it held the lock and released
-- it (see release.lua).

local tok, fifo = ARGV[1], ARGV[2] ~= '0'
dequeue(tok)
local t = now()
local st = load(t)
local r = release(st, tok, t, fifo, ARGV[3])
if r == 0 then
	-- it may have been first in line for a free lock
	serve(st, t, fifo, ARGV[3])
end
return r
