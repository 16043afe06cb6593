-- Purpose: set an agent's max_running (migration 0016; null clears it): the most of its calls that
--   run at once, whatever tool they call (a claim from the queue never goes past it). Run by the
--   schema's owner or the control plane.
-- Zero rows: no such agent.
-- Parameters: agent_id, max_running
update agents
set max_running = :max_running::integer
where id = :agent_id::text
returning id, max_running
