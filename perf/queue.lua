-- wrk script: poll a waiting room's status, cycling through buyers and
-- their tickets (a file of "<uid> <ticket>" lines).
-- usage: wrk ... -s perf/queue.lua URL -- /api/v1/activities/ID/queue TICKETS_FILE
-- Used by perf/wrk-queue.sh.
local buyers = {}
local i = 0
function init(args)
  path = args[1]
  for line in io.lines(args[2]) do
    local uid, ticket = line:match("^(%S+) (%S+)$")
    if uid then
      buyers[#buyers + 1] = {uid, ticket}
    end
  end
end
function request()
  i = i % #buyers + 1
  local b = buyers[i]
  return wrk.format("GET", path, {["X-User-ID"] = b[1], ["X-Queue-Ticket"] = b[2]}, nil)
end
