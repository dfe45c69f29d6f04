-- acquire_free.lua: acquire.lua's uncontended case, a plain mutex that is
-- free with nobody waiting (waiters get a free lock first): one EXISTS, one
-- SET NX, the fencing token. It runs right after core.lua, before
-- contended.lua and lib.lua define their functions, and leaves every other
-- case, untouched, to acquire_fast.lua (which knows that this one found
-- the lock taken, or waiters in line) and acquire.lua, which describes the
-- arguments and the reply.
if (ARGV[3] or 'p') == 'p' and ARGV[4] ~= '2' and redis.call('exists', Q) == 0
	and redis.call('set', K, ARGV[1], 'nx', 'px', ARGV[2]) then
	local token = fence((ARGV[4] == '1' and ARGV[5] ~= '0') and block or 1)
	redis.call('append', K, ' ' .. str(token))
	return token
end
