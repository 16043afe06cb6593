-- Purpose: an operator cancels a call, guarded by the state and token they saw.
--   queued -> cancelled (it never started); running -> cancel_requested (NOT stopped: the
--   worker hears it at its next heartbeat and confirms; until then it may still be running).
--   The action is journaled in job_events (kind operator_cancel, outcome applied or refused)
--   in this same statement, with the operator, the reason and a request id (taken from the
--   transaction setting leasectl.request_id when the caller set one).
-- Zero rows: refused -- the call changed since you looked (state or token differ) or is in a
--   state that cannot be cancelled. The refusal is journaled. No such call: nothing journaled.
-- Parameters: job_id, seen_state, seen_token, operator, reason
with target as (
    select j.id, j.state, j.fencing_token, j.owner_id,
           set_config('leasectl.actor', :operator::text, true) as actor
    from tool_jobs j
    where j.id = :job_id::uuid
    for no key update of j
),
applied as (
    update tool_jobs j
    set state                   = case when j.state = 'queued' then 'cancelled' else 'cancel_requested' end,
        cancel_requested_at     = now(),
        cancel_requested_by     = :operator::text,
        cancel_requested_reason = :reason::text,
        lease_until             = case when j.state = 'queued' then null else j.lease_until end,
        terminal_reason         = case when j.state = 'queued'
                                       then 'cancelled before it started by ' || :operator::text
                                       else j.terminal_reason end
    from target t
    where j.id = t.id
      and j.state = :seen_state::text
      and j.fencing_token = :seen_token::bigint
      and j.state in ('queued', 'running')
    returning j.id, j.state, j.fencing_token, j.owner_id, j.lease_until, j.cancel_requested_at
),
journal as (
    insert into job_events (job_id, kind, actor, fencing_token, state_from, state_to, owner_from,
                            owner_to, reason, request_id, details)
    select t.id, 'operator_cancel', :operator::text, coalesce(a.fencing_token, t.fencing_token),
           t.state, coalesce(a.state, t.state), t.owner_id, coalesce(a.owner_id, t.owner_id),
           :reason::text,
           coalesce(nullif(current_setting('leasectl.request_id', true), '')::uuid, gen_random_uuid()),
           jsonb_build_object(
               'outcome', case when a.id is null then 'refused' else 'applied' end,
               'seen_state', :seen_state::text, 'seen_token', :seen_token::bigint,
               'refusal', case
                   when a.id is not null then null
                   when t.state is distinct from :seen_state::text
                     or t.fencing_token is distinct from :seen_token::bigint
                       then 'the call changed since you looked'
                   else 'a ' || t.state || ' call cannot be cancelled' end)
    from target t
    left join applied a on a.id = t.id
    returning request_id
)
select a.id as job_id, a.state, a.fencing_token, a.owner_id, a.lease_until, a.cancel_requested_at,
       (select request_id from journal) as request_id
from applied a
