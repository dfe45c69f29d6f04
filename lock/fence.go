package lock

// FenceLua defines fence(key, token), the resource's side of fencing for
// data kept in Redis: prepend it to the scripts that read or change data
// under a lock, and let every one of them, reads included, call it first
// with the lock's token (Lock.Token):
//
//	if not fence(KEYS[2], ARGV[1]) then return redis.error_reply('FENCED') end
//
// key holds the largest token this resource has seen (on Redis Cluster, put
// it in the data's hash slot). fence returns false, changing nothing, when
// token is below it: a newer holder has used the resource, and the caller's
// lock is gone. Otherwise it records token and returns true. See the
// package documentation for why reads must call it too.
const FenceLua = `
local function fence(key, token)
	token = tonumber(token)
	local seen = tonumber(redis.call('get', key) or '0')
	if token < seen then
		return false
	end
	if token > seen then
		redis.call('set', key, string.format('%.0f', token))
	end
	return true
end
`
