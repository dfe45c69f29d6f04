-- extend.lua: set the lease of a hold that still holds the lock. The lock's
-- key then lives as long as its longest hold: extending one hold never
-- shortens another. (core.lua comes first: it describes the keys.)
--
-- KEYS[1]  K (see core.lua)
-- ARGV[1]  hold token
-- ARGV[2]  lease in milliseconds, from now
--
-- Returns 1 extended, 0 not held (nothing is changed).

local tok, lease = ARGV[1], ARGV[2]
local v = redis.pcall('get', K)
if type(v) == 'string' then
	if string.sub(v, 1, #tok + 1) ~= tok .. ' ' then
		return 0
	end
	redis.call('pexpire', K, lease)
	return 1
end
if not v then
	return 0
end
local t = now()
local st = load(t)
local h = st.live[tok]
if not h then
	return 0
end
h.e = t + tonumber(lease)
local val = str(h.e) .. ' ' .. h.token .. ' ' .. h.x
if h.md ~= '' then
	val = val .. ' ' .. h.md
end
redis.call('hset', K, tok, val)
expire(st, t)
return 1
