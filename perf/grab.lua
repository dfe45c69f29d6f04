-- wrk script: POST to the grab path with a fresh X-User-ID per request.
-- usage: wrk ... -s perf/grab.lua URL -- /api/v1/activities/ID/grab FIRST_USER_ID
-- Used by perf/wrk-grab.sh, perf/many-sales.sh and perf/dashboard-viewers.sh.
local counter = 0
function init(args)
  path = args[1]
  base = tonumber(args[2] or "1")
end
function request()
  counter = counter + 1
  return wrk.format("POST", path, {["X-User-ID"] = tostring(base + counter)}, nil)
end
