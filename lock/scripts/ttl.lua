-- ttl.lua: the remaining lease of a lock that this hold still holds.
--
-- KEYS[1]  the lock (see acquire.lua)
-- ARGV[1]  hold token
-- ARGV[2]  '' for a plain (string) lock, 'h' for a hash lock (default '')
--
-- Returns the remaining lease in ms, or -3 when not held.
local tok, held = ARGV[1], false
if (ARGV[2] or '') == '' then
	local v = redis.pcall('get', KEYS[1])
	held = v == tok or type(v) == 'string' and string.sub(v, 1, #tok + 1) == tok .. '*'
else
	held = redis.pcall('hexists', KEYS[1], tok) == 1
end
if not held then
	return -3
end
return redis.call('pttl', KEYS[1])
