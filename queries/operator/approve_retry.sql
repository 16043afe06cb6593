-- Purpose: a human approves one more attempt of a call whose outcome is unknown:
--   outcome_unknown -> queued, with retry_approved_by/at/reason and room for exactly one more
--   attempt. The executor (the call's last owner or its agent) can never approve its own retry.
--   The side-effect mark is cleared for the new attempt; job_events keeps the old one, and
--   external_request_id stays so the next owner sees which request may already have run.
--   Journaled in this statement (kind operator_approve_retry), applied or refused.
-- Zero rows: refused -- the call changed since you looked, is not outcome_unknown, or you are
--   its executor. The refusal is journaled.
-- Parameters: job_id, seen_state, seen_token, operator, reason
with target as (
    select j.id, j.state, j.fencing_token, j.owner_id, j.agent_id,
           set_config('leasectl.actor', :operator::text, true) as actor
    from tool_jobs j
    where j.id = :job_id::uuid
    for no key update of j
),
applied as (
    update tool_jobs j
    set state                  = 'queued',
        retry_approved_by      = :operator::text,
        retry_approved_at      = now(),
        retry_approved_reason  = :reason::text,
        extra_attempts         = greatest(j.extra_attempts, j.attempt + 1 - t.max_attempts),
        side_effect_started_at = null,
        lease_until            = null
    from target tg, tools t
    where j.id = tg.id
      and t.name = j.tool
      and j.state = :seen_state::text
      and j.fencing_token = :seen_token::bigint
      and j.state = 'outcome_unknown'
      and :operator::text is distinct from j.owner_id
      and :operator::text is distinct from j.agent_id
    returning j.id, j.state, j.fencing_token, j.retry_approved_at
),
journal as (
    insert into job_events (job_id, kind, actor, fencing_token, state_from, state_to, owner_from,
                            owner_to, reason, request_id, details)
    select t.id, 'operator_approve_retry', :operator::text, t.fencing_token,
           t.state, coalesce(a.state, t.state), t.owner_id, t.owner_id, :reason::text,
           coalesce(nullif(current_setting('leasectl.request_id', true), '')::uuid, gen_random_uuid()),
           jsonb_build_object(
               'outcome', case when a.id is null then 'refused' else 'applied' end,
               'seen_state', :seen_state::text, 'seen_token', :seen_token::bigint,
               'refusal', case
                   when a.id is not null then null
                   when t.state is distinct from :seen_state::text
                     or t.fencing_token is distinct from :seen_token::bigint
                       then 'the call changed since you looked'
                   when t.state <> 'outcome_unknown'
                       then 'only a call with an unknown outcome needs an approval (this one is '
                            || t.state || ')'
                   else 'the executor of a call cannot approve its own retry' end)
    from target t
    left join applied a on a.id = t.id
    returning request_id
)
select a.id as job_id, a.state, a.fencing_token, a.retry_approved_at,
       (select request_id from journal) as request_id
from applied a
