-- extend.lua: set the lease of a lock that this hold still holds.
--
-- KEYS[1]  the lock (see acquire.lua)
-- ARGV[1]  hold token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  '' for a plain (string) lock, 'h' for a hash lock (default '')
--
-- Returns 1 extended, 0 not held (nothing is changed).
local tok, held = ARGV[1], false
if (ARGV[3] or '') == '' then
	local v = redis.pcall('get', KEYS[1])
	held = v == tok or type(v) == 'string' and string.sub(v, 1, #tok + 1) == tok .. '*'
else
	held = redis.pcall('hexists', KEYS[1], tok) == 1
end
if not held then
	return 0
end
redis.call('pexpire', KEYS[1], ARGV[2])
return 1
