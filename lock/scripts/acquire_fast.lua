-- acquire_fast.lua: acquire.lua's common cases, a plain mutex that is free
-- or held by another plain hold. It runs before lib.lua (see core.lua), and
-- leaves every other case, untouched, to acquire.lua, which describes the
-- arguments and the reply.
do
	local tok, lease, spec, how = ARGV[1], ARGV[2], ARGV[3] or 'p', ARGV[4] or '0'
	if spec == 'p' and how ~= '2' then
		-- free, and nobody waits: one SET (waiters get a free lock first)
		if redis.call('exists', Q) == 0 and redis.call('set', K, tok, 'nx', 'px', lease) then
			local token = fence((how ~= '0' and ARGV[5] ~= '0') and block or 1)
			redis.call('append', K, ' ' .. str(token))
			return token
		end
		-- held by another plain hold: no room for a plain one, whatever the
		-- line holds; wait in line if asked to
		local v = redis.pcall('get', K)
		if type(v) == 'string' and string.sub(v, 1, #tok + 1) ~= tok .. ' ' then
			if how == '1' then
				enqueue(tok, now(), tonumber(ARGV[6]), lease, spec, '')
			end
			return -1 - math.max(redis.call('pttl', K), 0)
		end
	end
end
