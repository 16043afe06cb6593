-- Purpose: move every agent of a subtree that may legally go to state_to: running -> draining;
--   running, draining -> aborting; draining, aborting -> reconciling; reconciling -> terminated.
--   A child hears it at its next agent/heartbeat.sql. Journaled in fleet_events by trigger.
-- Zero rows: every agent of the subtree is already there (or past it).
-- Parameters: root_agent_id, state_to
update agents a
set state = :state_to::text
from leasectl_subtree(:root_agent_id::text) s,
     (select set_config('leasectl.actor', 'control-plane', true)) as actor
where a.id = s.agent_id
  and (   (:state_to::text = 'draining'    and a.state = 'running')
       or (:state_to::text = 'aborting'    and a.state in ('running', 'draining'))
       or (:state_to::text = 'reconciling' and a.state in ('draining', 'aborting'))
       or (:state_to::text = 'terminated'  and a.state = 'reconciling'))
returning a.id, a.state
