-- Purpose: an operator closes a call after checking outside, guarded by the state and token
--   they saw. outcome_unknown -> succeeded | failed; queued -> failed | cancelled;
--   running / cancel_requested -> succeeded | failed | cancelled.
--   A call whose owner still holds a live lease is refused unless force: forcing bumps the
--   fencing token, which fences the owner out (its heartbeat and result get zero rows).
--   Journaled in this statement (kind operator_mark_terminal), applied or refused.
-- Zero rows: refused -- the call changed since you looked, the target state is not allowed
--   from its state, or the lease is live and force was not given. The refusal is journaled.
-- Parameters: job_id, seen_state, seen_token, terminal_state, operator, reason, force
with target as (
    select j.id, j.state, j.fencing_token, j.owner_id,
           j.state in ('running', 'cancel_requested') and j.lease_until >= now() as lease_live,
           set_config('leasectl.actor', :operator::text, true) as actor
    from tool_jobs j
    where j.id = :job_id::uuid
    for no key update of j
),
applied as (
    update tool_jobs j
    set state           = :terminal_state::text,
        lease_until     = null,
        fencing_token   = case when t.lease_live then j.fencing_token + 1 else j.fencing_token end,
        terminal_reason = 'marked ' || :terminal_state::text || ' by ' || :operator::text
                          || ': ' || :reason::text
    from target t
    where j.id = t.id
      and j.state = :seen_state::text
      and j.fencing_token = :seen_token::bigint
      and (   (j.state = 'outcome_unknown' and :terminal_state::text in ('succeeded', 'failed'))
           or (j.state = 'queued' and :terminal_state::text in ('failed', 'cancelled'))
           or (j.state in ('running', 'cancel_requested')
               and :terminal_state::text in ('succeeded', 'failed', 'cancelled')))
      and (not t.lease_live or :force::boolean)
    returning j.id, j.state, j.fencing_token, j.owner_id, t.lease_live as fenced, j.finished_at
),
journal as (
    insert into job_events (job_id, kind, actor, fencing_token, state_from, state_to, owner_from,
                            owner_to, reason, request_id, details)
    select t.id, 'operator_mark_terminal', :operator::text, coalesce(a.fencing_token, t.fencing_token),
           t.state, coalesce(a.state, t.state), t.owner_id, coalesce(a.owner_id, t.owner_id),
           :reason::text,
           coalesce(nullif(current_setting('leasectl.request_id', true), '')::uuid, gen_random_uuid()),
           jsonb_build_object(
               'outcome', case when a.id is null then 'refused' else 'applied' end,
               'terminal_state', :terminal_state::text, 'force', :force::boolean,
               'fenced_owner', coalesce(a.fenced, false),
               'seen_state', :seen_state::text, 'seen_token', :seen_token::bigint,
               'refusal', case
                   when a.id is not null then null
                   when t.state is distinct from :seen_state::text
                     or t.fencing_token is distinct from :seen_token::bigint
                       then 'the call changed since you looked'
                   when t.lease_live and not :force::boolean
                       then 'the owner holds a live lease; force would fence it out'
                   else 'a ' || t.state || ' call cannot be marked ' || :terminal_state::text end)
    from target t
    left join applied a on a.id = t.id
    returning request_id
)
select a.id as job_id, a.state, a.fencing_token, a.owner_id, a.fenced, a.finished_at,
       (select request_id from journal) as request_id
from applied a
