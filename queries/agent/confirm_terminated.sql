-- Purpose: an agent whose subtree is being shut down confirms it has stopped: no calls of its
--   own in flight, nothing more will be started. The reconciliation record lists it among the
--   children confirmed; an agent that never confirms is listed unaccounted.
-- Zero rows: no such agent, or it is not being shut down (running agents have nothing to confirm).
-- Parameters: agent_id
update agents
set terminated_confirmed_at = coalesce(terminated_confirmed_at, now()),
    last_seen_at = now()
where id = :agent_id::text
  and state in ('draining', 'aborting', 'reconciling')
returning id, state, terminated_confirmed_at
