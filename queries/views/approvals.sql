-- Purpose: calls whose outcome is unknown, each with what may already have happened: its
--   tool and side-effect class, idempotency key, external request id, when the side effect
--   started, the last lease its owner had confirmed, attempts, the error, and how many other
--   calls share its key stem. Unverifiable ones first: only a human can decide those.
--   The start of the request is found under either kind name (history never changes). `checks`:
--   every check its owners recorded with the service before repeating a request (migration 0014:
--   side_effect_checked), oldest first, each {at, actor, fencing_token, found, request, details}.
-- Zero rows: no call is waiting for a human.
-- Parameters: none
select j.id, j.tool, t.side_effect, j.state, j.owner_id, j.agent_id, j.fencing_token, j.attempt,
       t.max_attempts + j.extra_attempts as max_attempts, j.idempotency_key,
       j.external_request_id, j.error, j.created_at, j.claimed_at, j.session_id, j.model,
       j.provider,
       e.at as outcome_unknown_at,
       coalesce((e.details ->> 'previous_lease_until')::timestamptz, j.lease_until) as last_confirmed_lease,
       s.side_effect_started_at,
       c.checks,
       (select count(*) from tool_jobs o
        where o.id <> j.id
          and o.idempotency_key >= substring(j.idempotency_key from '^(.*:)[^:]*$')
          and o.idempotency_key < substring(j.idempotency_key from '^(.*:)[^:]*$') || chr(1114111)
       ) as related_calls,
       leasectl_now() as db_now
from tool_jobs j
join tools t on t.name = j.tool
left join lateral (
    select ev.at, ev.details
    from job_events ev
    where ev.job_id = j.id and ev.state_to = 'outcome_unknown' and ev.kind = 'state_changed'
    order by ev.id desc
    limit 1
) e on true
left join lateral (
    select ev.at as side_effect_started_at
    from job_events ev
    -- tool_request_started since migration 0005; side_effect_started in older history
    where ev.job_id = j.id and ev.kind in ('tool_request_started', 'side_effect_started')
    order by ev.id desc
    limit 1
) s on true
left join lateral (
    select coalesce(jsonb_agg(jsonb_build_object('at', ev.at, 'actor', ev.actor, 'fencing_token', ev.fencing_token,
                                                 'found', ev.details ->> 'found',
                                                 'request', ev.details ->> 'external_request_id',
                                                 'details', ev.details -> 'details') order by ev.id),
                    '[]'::jsonb) as checks
    from job_events ev
    where ev.job_id = j.id and ev.kind = 'side_effect_checked'
) c on true
where j.state = 'outcome_unknown'
order by case t.side_effect when 'mutating_unverifiable' then 0 when 'mutating_verifiable' then 1 else 2 end,
         coalesce(e.at, j.created_at)
