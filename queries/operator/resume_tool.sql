-- Purpose: an operator (or the control plane) resumes a paused tool: its queued calls are claimed
--   again. Runs the SECURITY DEFINER function leasectl_resume_tool (migration 0016): the resume and
--   its journal row (fleet_events tool_resumed, with who paused it, when and why) in one
--   statement. Returns the pause it ended.
-- Zero rows: no such tool, or it is not paused (nothing changed, nothing journaled).
-- Parameters: tool, resumed_by, reason
select name, paused_at, paused_by, pause_reason
from leasectl_resume_tool(:tool::text, :resumed_by::text, :reason::text)
