-- ttl.lua: the lease left of a hold that still holds the lock. (core.lua
-- comes first: it describes the keys.)
--
-- KEYS[1]  K (see core.lua)
-- ARGV[1]  hold token
--
-- Returns the lease left in ms, or -3 when not held.

local tok = ARGV[1]
local v = redis.pcall('get', K)
if type(v) == 'string' then
	if string.sub(v, 1, #tok + 1) ~= tok .. ' ' then
		return -3
	end
	return redis.call('pttl', K)
end
if not v then
	return -3
end
local t = now()
local h = load(t).live[tok]
if not h then
	return -3
end
return h.e - t
