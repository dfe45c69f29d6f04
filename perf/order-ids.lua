-- wrk script: GET /api/v1/orders/{id} with a random id and a random X-User-ID per request.
-- usage: wrk ... -s perf/order-ids.lua URL [-- ACTIVITY | PATH]
--   no argument: ids of 18 random digits (below 2^63; their activities, id >> 39, lie between
--   181,898 and 1,818,989: none exists)
--   ACTIVITY:    ids of that activity, any local part (below 2^39)
--   PATH:        that path (beginning with /) every time, for a flood of something else
-- Used by perf/lookup-flood.sh.
function init(args)
  activity = tonumber(args[1] or "")
  if args[1] and args[1]:sub(1, 1) == "/" then fixed = args[1] end
  math.randomseed(os.time() + math.floor(os.clock() * 1e6))
end
function request()
  if fixed then return wrk.format("GET", fixed, {["X-User-ID"] = "1"}, nil) end
  local id
  if activity then
    id = string.format("%.0f", activity * 2^39 + math.random(1, 2^31 - 1) * 256 + math.random(0, 255))
  else
    id = tostring(math.random(1, 9))
    for _ = 1, 17 do id = id .. tostring(math.random(0, 9)) end
  end
  return wrk.format("GET", "/api/v1/orders/" .. id, {["X-User-ID"] = tostring(math.random(1, 2^31 - 1))}, nil)
end
