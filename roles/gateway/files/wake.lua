-- Installed by the graviton.llama_rpc collection (role gateway): a deploy overwrites changes made here.
-- The wake of stopped clusters (gateway_wake_timeout). HAProxy runs the action llama_wake for a request that has
-- passed the key check while no cluster is up: it asks each master's wake socket (role rpc_master,
-- rpc_master_wake_port) to start llama-server, sending the masters' key, then holds the request until a cluster
-- passes its health checks and lets it through; past the bound it answers 503 with Retry-After, so that no client
-- hangs. An AWS cluster (a target aws:<region>:<cluster>) is woken through the helper on the gateway's loopback
-- (llama-rpc-gateway-wake-aws), which starts its instances; its master's wake socket is asked first, when it has one, to
-- call off an idle stop it announced. A wake that found a cluster stopping (an AWS instance cannot start before it has
-- stopped) is sent again every WAKE_AGAIN_MS while the request waits. Settings come from the environment:
-- LLAMA_GATEWAY_WAKE_TARGETS (each master's wake socket host:port, or aws:<region>:<cluster>, spaces between),
-- LLAMA_GATEWAY_WAKE_AWS (the helper's host:port), LLAMA_GATEWAY_WAKE_TIMEOUT (seconds), LLAMA_GATEWAY_RETRY_AFTER
-- and LLAMA_GATEWAY_UNAVAILABLE (the 503's Retry-After and body, those of HAProxy's own 503 too),
-- LLAMA_GATEWAY_BACKEND_AUTHORIZATION (Bearer and the masters' key).

local targets = {}
for target in string.gmatch(os.getenv("LLAMA_GATEWAY_WAKE_TARGETS") or "", "%S+") do
  table.insert(targets, target)
end
local bound_ms = math.floor(tonumber(os.getenv("LLAMA_GATEWAY_WAKE_TIMEOUT") or "0") * 1000)
local key = string.gsub(os.getenv("LLAMA_GATEWAY_BACKEND_AUTHORIZATION") or "", "^Bearer ", "")
local aws_helper = os.getenv("LLAMA_GATEWAY_WAKE_AWS") or ""
local retry_after = os.getenv("LLAMA_GATEWAY_RETRY_AFTER") or tostring(math.max(1, bound_ms // 1000))
local unavailable = os.getenv("LLAMA_GATEWAY_UNAVAILABLE") or '{"error":{"code":503,"type":"unavailable_error"}}'
local POLL_MS = 500
local WAKE_AGAIN_MS = 10000  -- requests that come together send one wake, not one each

local last_wake_ms = nil

local function now_ms()
  local now = core.now()
  return now.sec * 1000 + math.floor(now.usec / 1000)
end

local function a_cluster_is_up()
  for _, server in pairs(core.backends["llama_servers"].servers) do
    if string.sub(server:get_stats()["status"], 1, 2) == "UP" then
      return true
    end
  end
  return false
end

-- One line to a host:port, and its one-line answer.
local function ask(address, line)
  local host, port = string.match(address, "^%[?(.-)%]?:(%d+)$")
  local socket = core.tcp()
  socket:settimeout(5)
  local connected, why = socket:connect(host, tonumber(port))
  if not connected then
    return "no answer (" .. tostring(why) .. ")"
  end
  socket:send(line .. "\n")
  local answer = socket:receive("*l")
  socket:close()
  return answer or "no answer"
end

-- A master's wake socket gets the key ("starting <state>", "refused", "failed"); an AWS cluster goes to the helper
-- ("starting <instance ids>", "running", "refused", "failed").
local function wake(target)
  local region, cluster = string.match(target, "^aws:([^:]+):(.+)$")
  if region then
    return ask(aws_helper, region .. " " .. cluster)
  end
  return ask(target, key)
end

local function wake_all()
  for _, target in ipairs(targets) do
    core.Info("no cluster is up: woke " .. target .. ": " .. wake(target))
  end
end

core.register_action("llama_wake", { "http-req" }, function(txn)
  local began = now_ms()
  local woke = began
  if last_wake_ms == nil or began - last_wake_ms > WAKE_AGAIN_MS then
    last_wake_ms = began
    wake_all()
  end
  while now_ms() - began < bound_ms do
    if a_cluster_is_up() then
      core.Info(string.format("a cluster is up %.1f s after the request came: it goes through", (now_ms() - began) / 1000))
      return
    end
    if now_ms() - woke > WAKE_AGAIN_MS and now_ms() - last_wake_ms > WAKE_AGAIN_MS then
      woke, last_wake_ms = now_ms(), now_ms()
      wake_all()
    end
    core.msleep(POLL_MS)
  end
  core.Info(string.format("no cluster came up within %d s: 503", bound_ms // 1000))
  local reply = txn:reply({
    status = 503,
    reason = "Service Unavailable",
    headers = {
      ["content-type"] = { "application/json" },
      ["retry-after"] = { retry_after },
    },
    body = unavailable,
  })
  txn:done(reply)
end)
