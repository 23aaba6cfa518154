-- Argo CD health check for backendslice.io/BackendProvider.
--
-- Install it as resource.customizations.health.backendslice.io_BackendProvider
-- in argocd-cm, next to the ExternalBackend's health.lua (docs/gitops.md
-- shows how). Argo CD runs it without the Lua string library, so it only
-- compares and concatenates.
--
-- The controller writes Ready, stamped with the generation it checked, and
-- moves status.observedGeneration with it. Stalled, beside a False Ready
-- with the same reason and message, is for kstatus: Ready alone decides
-- here, Degraded when False.

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
  return say("Progressing", "Waiting for the controller to check this BackendProvider")
end
if (ready.observedGeneration or 0) ~= generation then
  return say("Progressing", "Waiting for the controller to check generation " .. generation)
end
if ready.status == "True" then
  return say("Healthy", ready.message or "Ready")
end
if ready.status == "False" then
  return say("Degraded", (ready.reason or "NotReady") .. ": " .. (ready.message or ""))
end
-- Ready=Unknown: not written by this controller; nothing is known yet.
return say("Progressing", (ready.reason or "Unknown") .. ": " .. (ready.message or ""))
