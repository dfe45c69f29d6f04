-- acquire_fast.lua: acquire.lua's common contended case, a plain mutex
-- held by another plain hold (acquire_free.lua took the free one). It runs
-- before lib.lua (see core.lua), and leaves every other case, untouched,
-- to acquire.lua, which describes the arguments and the reply; a short
-- call (see core.lua) goes no further.
do
	local tok, lease, spec, how = ARGV[1], ARGV[2], ARGV[3] or 'p', ARGV[4] or '0'
	if spec == 'p' and how ~= '2' then
		-- held by another plain hold: no room for a plain one, whatever the
		-- line holds; wait in line if asked to
		local v = redis.pcall('get', K)
		if type(v) == 'string' and string.sub(v, 1, #tok + 1) ~= tok .. ' ' then
			if how == '1' then
				enqueue(tok, now(), tonumber(ARGV[6]), lease, spec, '')
				mark(v)
			end
			return -1 - math.max(redis.call('pttl', K), 0)
		end
	end
end
-- Every other case needs the full call (see core.lua).
if not W then
	return needFull
end
