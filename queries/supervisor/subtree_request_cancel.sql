-- Purpose: an abort asks every running call of the subtree to stop: running -> cancel_requested.
--   NOT stopped yet: each worker hears it at its next heartbeat and must confirm
--   (worker/confirm_cancel.sql); what is unconfirmed at the end of the window is fenced.
-- Zero rows: nothing of the subtree is running (or only locked rows, left for the next tick).
-- Parameters: root_agent_id, shutdown_id
with actor as (
    select set_config('leasectl.actor', 'control-plane', true) as name
),
running as (
    select j.id
    from tool_jobs j
    join leasectl_subtree(:root_agent_id::text) s on s.agent_id = j.agent_id
    cross join actor
    where j.state = 'running'
    for no key update of j skip locked
)
update tool_jobs j
set state                   = 'cancel_requested',
    cancel_requested_at     = now(),
    cancel_requested_by     = 'control-plane',
    cancel_requested_reason = 'the subtree is being aborted (shutdown ' || :shutdown_id::uuid || ')'
from running r
where j.id = r.id
  and j.state = 'running'
returning j.id, j.tool, j.agent_id, j.owner_id, j.fencing_token
