-- Purpose: the window is over: every call of the subtree still running or waiting for its
--   cancel to be confirmed is taken from its owner. The fencing token goes up, so the owner's
--   heartbeat and result change zero rows from now on. An unverifiable call whose side effect
--   started -> outcome_unknown (into the approvals queue: only a human may retry it); anything
--   else -> cancelled, reconciled as cancel_unconfirmed (nobody confirmed that it stopped).
-- Zero rows: nothing of the subtree is still live (or only locked rows, left for the next tick).
-- Parameters: root_agent_id, shutdown_id
with actor as (
    select set_config('leasectl.actor', 'control-plane', true) as name
),
live as (
    select j.id, j.state as state_from,
           t.side_effect = 'mutating_unverifiable' and j.side_effect_started_at is not null as unknowable
    from tool_jobs j
    join tools t on t.name = j.tool
    join leasectl_subtree(:root_agent_id::text) s on s.agent_id = j.agent_id
    cross join actor
    where j.state in ('running', 'cancel_requested')
    for no key update of j skip locked
)
update tool_jobs j
set state           = case when l.unknowable then 'outcome_unknown' else 'cancelled' end,
    lease_until     = null,
    fencing_token   = j.fencing_token + 1,
    terminal_reason = case when l.unknowable then j.terminal_reason
                           else 'cancel unconfirmed: fenced by the control plane at the end of the window '
                                || '(shutdown ' || :shutdown_id::uuid || ')' end,
    error           = case when l.unknowable
                           then coalesce(j.error, '{}'::jsonb) || jsonb_build_object(
                                'shutdown', 'fenced by the control plane after an unverifiable side effect started '
                                            || '(shutdown ' || :shutdown_id::uuid || ')')
                           else j.error end
from live l
where j.id = l.id
  and j.state = l.state_from
returning j.id, j.tool, j.agent_id, l.state_from, j.state as state_to, j.owner_id, j.fencing_token
