-- release_free.lua: release.lua's uncontended case, a plain mutex released
-- with nobody waiting: one GET and one DEL when the hold has no mark (see
-- mark in contended.lua), one LRANGE more when it has one. It runs right after
-- core.lua, before contended.lua and lib.lua define their functions, and
-- leaves every other case to release_fast.lua and release.lua (which
-- describes the arguments and the reply), with what it read: held, K's
-- value (or false for Redlock, whose releases it does not take), and
-- first, the first 8 waiters when K is this hold's plain mutex.
local held = ARGV[2] ~= '0' and redis.pcall('get', K)
local first
if type(held) == 'string' and string.sub(held, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then
	if not string.find(held, ' ', #ARGV[1] + 2, true) then
		-- not marked (see mark in contended.lua): nobody waits
		redis.call('del', K)
		return 1
	end
	if not Q then
		return needFull -- a short call (see core.lua): someone may wait
	end
	first = redis.call('lrange', Q, 0, 7)
	if #first == 0 then
		redis.call('del', K)
		return 1
	end
end
