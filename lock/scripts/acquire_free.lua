-- acquire_free.lua: acquire.lua's uncontended case, a plain mutex that is
-- free with nobody waiting (waiters get a free lock first): one EXISTS, the
-- fencing token (one INCRBY), one SET NX. It runs right after core.lua,
-- before any function is defined, and calls none: it issues the token as
-- fence in contended.lua does, and formats it as str does. It leaves every
-- other case, untouched, to acquire_fast.lua (which knows that this one
-- found the lock taken, or waiters in line) and acquire.lua, which
-- describes the arguments and the reply.
--
-- The token is issued before the SET that carries it: when the lock turns
-- out to be taken, the token is not used (tokens only need to grow), and the
-- hold is written whole, without a mark (see mark in contended.lua): nobody
-- waits.
if (ARGV[3] or 'p') == 'p' and ARGV[4] ~= '2' and redis.call('exists', Q) == 0 then
	local n = (ARGV[4] == '1' and ARGV[5] ~= '0') and block or 1
	local token = redis.call('incrby', F, n)
	if token == n then
		-- a missing counter (see fence)
		local t = redis.call('time')
		token = tonumber((t[1] + 1) .. string.sub('00000' .. t[2], -6)) + n - 1
		redis.call('set', F, string.format('%.0f', token), 'px', 1000)
	end
	token = token - n + 1
	if redis.call('set', K, ARGV[1] .. ' ' .. string.format('%.0f', token), 'nx', 'px', ARGV[2]) then
		return token
	end
end
