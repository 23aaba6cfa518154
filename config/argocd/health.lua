-- Argo CD health check for backendslice.io/ExternalBackend.
--
-- Install it as resource.customizations.health.backendslice.io_ExternalBackend
-- in argocd-cm (docs/gitops.md shows how). Argo CD runs it without the Lua
-- string library, so it only compares and concatenates.
--
-- The controller stamps every condition with the generation it looked at on
-- each pass, but moves status.observedGeneration only once a generation is
-- handled for good (well, or failing in a way retrying cannot fix). So the
-- Ready condition tells whether the controller has seen this spec at all,
-- and status.observedGeneration whether it is done with it.

local function condition(conditions, name)
  for _, c in ipairs(conditions) do
    if c.type == name then
      return c
    end
  end
  return nil
end

local function say(status, message)
  return { status = status, message = message }
end

local generation = obj.metadata.generation or 0
local status = obj.status or {}
local ready = condition(status.conditions or {}, "Ready")

if ready == nil then
  return say("Progressing", "Waiting for the controller to report on this ExternalBackend")
end
if (ready.observedGeneration or 0) ~= generation then
  return say("Progressing", "Waiting for the controller to observe generation " .. generation)
end
if obj.spec.suspend == true then
  return say("Suspended", ready.message or "spec.suspend is true")
end

local stalled = condition(status.conditions, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  return say("Degraded", stalled.reason .. ": " .. (stalled.message or ""))
end

if ready.status == "True" and (status.observedGeneration or 0) == generation then
  return say("Healthy", ready.message or "Ready")
end
-- Progressing is the one Ready=False reason that is not a failure: the
-- controller is part way through (for example recreating the Service).
if ready.status == "False" and ready.reason ~= "Progressing" then
  return say("Degraded", ready.reason .. ": " .. (ready.message or ""))
end
return say("Progressing", (ready.reason or "Ready") .. ": " .. (ready.message or ""))
