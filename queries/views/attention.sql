-- Purpose: the calls that need attention, worst first, for the triage list: every live call
--   whose lease health is not healthy, plus calls where a stale-token write was rejected in
--   the last five minutes (a zombie worker is still out there), even if they have finished.
--   Cost follows the live calls and recent rejections, not the size of the history.
-- Zero rows: nothing needs attention.
-- Parameters: limit
with rejected as (
    select distinct job_id
    from job_events
    where kind in ('heartbeat_lost', 'result_rejected', 'receiver_rejected')
      and at > leasectl_now() - interval '5 minutes'
),
candidates as (
    select id from tool_jobs where state in ('running', 'cancel_requested', 'outcome_unknown')
    union
    select job_id from rejected
),
labelled as (
    select j.id, j.tool, t.side_effect, j.state, j.owner_id, j.fencing_token, j.attempt,
           t.max_attempts + j.extra_attempts as max_attempts, j.idempotency_key, j.agent_id,
           j.created_at, j.claimed_at, j.heartbeat_at, j.lease_until, j.deadline_at,
           j.cancel_requested_at, j.cancel_requested_by, j.side_effect_started_at,
           j.external_request_id, j.finished_at, j.completed_despite_cancel, j.model, j.provider,
           t.lease_seconds, t.heartbeat_seconds, t.jitter_seconds, t.stage_timeout_seconds,
           leasectl_job_health(j.state, j.lease_until, j.heartbeat_at, j.cancel_requested_at,
                               j.claimed_at, t.heartbeat_seconds, t.jitter_seconds,
                               t.stage_timeout_seconds, r.job_id is not null, leasectl_now()) as health
    from candidates c
    join tool_jobs j on j.id = c.id
    join tools t on t.name = j.tool
    left join rejected r on r.job_id = j.id
)
select l.*,
       leasectl_now() as db_now,
       extract(epoch from leasectl_now() - l.heartbeat_at)::float8 as heartbeat_age_seconds,
       extract(epoch from l.lease_until - leasectl_now())::float8 as lease_left_seconds,
       extract(epoch from l.deadline_at - leasectl_now())::float8 as deadline_left_seconds
from labelled l
where l.health <> 'healthy'
order by leasectl_health_rank(l.health),
         case l.health
             when 'lease_expired' then l.lease_until
             when 'cancel_unheard' then l.cancel_requested_at
             when 'heartbeat_late' then l.heartbeat_at
             when 'over_stage_timeout' then l.claimed_at
             when 'outcome_unknown' then coalesce(l.side_effect_started_at, l.created_at)
             else l.created_at
         end,
         l.id
limit :limit::integer
