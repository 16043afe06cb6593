-- Purpose: an operator (or the control plane) pauses a tool: none of its calls is claimed or
--   reclaimed from now on; running ones go on (migration 0016, docs/seeds.md §000: throttle a
--   flaky vendor without stopping workers). Runs the SECURITY DEFINER function
--   leasectl_pause_tool: the pause and its journal row (fleet_events tool_paused, with the request
--   id from the transaction setting leasectl.request_id) in one statement. The database refuses an
--   empty operator name or reason (22023).
-- Zero rows: no such tool, or it is already paused (nothing changed, nothing journaled).
-- Parameters: tool, paused_by, reason
select name, paused_at, paused_by, pause_reason
from leasectl_pause_tool(:tool::text, :paused_by::text, :reason::text)
