-- Purpose: a shutdown cancels the subtree's queued calls: they never start. A call that never
--   ran at all (attempt 0) is reconciled as never_started; one that ran before and was waiting
--   for another attempt, as cancelled. Rows locked by someone else are left for the next tick.
-- Zero rows: the subtree has no queued call (or only locked ones).
-- Parameters: root_agent_id, shutdown_id
with actor as (
    select set_config('leasectl.actor', 'control-plane', true) as name
),
queued as (
    select j.id
    from tool_jobs j
    join leasectl_subtree(:root_agent_id::text) s on s.agent_id = j.agent_id
    cross join actor
    where j.state = 'queued'
    for no key update of j skip locked
)
update tool_jobs j
set state                   = 'cancelled',
    lease_until             = null,
    cancel_requested_at     = now(),
    cancel_requested_by     = 'control-plane',
    cancel_requested_reason = 'shutdown ' || :shutdown_id::uuid,
    terminal_reason         = case when j.attempt = 0 then 'never started: ' else 'cancelled while queued: ' end
                              || 'the subtree is shutting down (shutdown ' || :shutdown_id::uuid || ')'
from queued q
where j.id = q.id
  and j.state = 'queued'
returning j.id, j.tool, j.agent_id, j.attempt
