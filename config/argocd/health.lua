-- Argo CD health check for backendslice.io/ExternalBackend.
--
-- Install it as resource.customizations.health.backendslice.io_ExternalBackend
-- in argocd-cm (docs/gitops.md shows how). Argo CD runs it without the Lua
-- string library, so it only compares and concatenates.
--
-- The controller stamps every condition with the generation it looked at on
-- each pass, but moves status.observedGeneration only once a generation is
-- handled for good (well, or failing in a way retrying cannot fix). So the
-- Ready condition tells whether the controller has seen this spec at all;
-- Ready=True is only ever written together with observedGeneration.
-- Reconciling=True (kstatus's condition) says a change is part way through
-- and the controller moves it on by itself, such as an adoption handing a
-- Service over.

local function condition(conditions, name)
  for _, c in ipairs(conditions) do
    if c.type == name then
      return c
    end
  end
  return nil
end

local function isTrue(c)
  return c ~= nil and c.status == "True"
end

local function say(status, message)
  return { status = status, message = message }
end

local function explain(c)
  return (c.reason or c.type) .. ": " .. (c.message or "")
end

local generation = obj.metadata.generation or 0
local status = obj.status or {}
local conditions = status.conditions or {}
local ready = condition(conditions, "Ready")

if ready == nil then
  return say("Progressing", "Waiting for the controller to report on this ExternalBackend")
end
if (ready.observedGeneration or 0) ~= generation then
  return say("Progressing", "Waiting for the controller to observe generation " .. generation)
end
if obj.spec.suspend == true then
  return say("Suspended", ready.message or "spec.suspend is true")
end

local stalled = condition(conditions, "Stalled")
if isTrue(stalled) then
  return say("Degraded", explain(stalled))
end
-- A failure the controller retries (SourceFailed, WriteFailed, ...) is
-- Degraded too, so that someone looks: it keeps what was published.
if ready.status == "False" then
  return say("Degraded", explain(ready))
end
local reconciling = condition(conditions, "Reconciling")
if isTrue(reconciling) then
  return say("Progressing", explain(reconciling))
end
if ready.status == "True" then
  return say("Healthy", ready.message or "Ready")
end
-- Ready=Unknown, which this controller writes only on a backend suspended
-- before its first pass (Suspended, above): nothing is known yet.
return say("Progressing", explain(ready))
