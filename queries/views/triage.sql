-- Purpose: everything the triage screen shows, from one pass over the live calls: the counts
--   that matter at 02:00 and the calls that need attention, worst first. Every live call whose
--   lease health is not healthy, plus finished calls where a stale-token write was rejected in
--   the last five minutes (a zombie worker is still out there).
--   Cost follows the live calls, not the history: live calls come from the partial index on
--   live states, rejections from the partial index on recent rejected writes, failures from the
--   partial index on failed calls; tool cutoffs and the clock are computed once per query, and
--   the clock travels with the cutoffs rather than being joined to every live row once more.
--   Each row carries the counts; with nothing to show, one row of counts with a null id.
--   A running call past its deadline is `past_deadline` (migration 0014): counted on its own, and
--   in expired_unswept too (its lease ended with its deadline and nobody has swept it yet), as is
--   a call past its hold, `past_max_hold` (migration 0016: its lease ended with its hold).
-- Zero rows: never.
-- Parameters: limit
with clock as materialized (
    select leasectl_now() as now
),
cutoffs as materialized (
    select c.*, clock.now from clock, leasectl_tool_cutoffs(clock.now) c
),
rejected as materialized (
    select distinct job_id
    from job_events
    where kind in ('heartbeat_lost', 'result_rejected', 'receiver_rejected')
      and at > (select now from clock) - interval '5 minutes'
),
-- narrow: only what decides health and order, for every live call
live as materialized (
    select j.id, j.state, j.created_at, j.claimed_at, j.lease_until, j.heartbeat_at,
           j.cancel_requested_at, j.side_effect_started_at, j.deadline_at, j.hold_until,
           leasectl_job_health(j.state, j.lease_until, j.heartbeat_at, j.cancel_requested_at,
                               j.claimed_at, k.late_before, k.unheard_before, k.stage_before,
                               j.recently_rejected, k.now, j.deadline_at, j.hold_until) as health
    from (
        -- "in (select ...)" is one hashed lookup per row; only the columns health and order need
        -- (j.* deforms every row up to its last column: measurably slower over 10,000 live calls)
        select j.id, j.tool, j.state, j.created_at, j.claimed_at, j.lease_until, j.heartbeat_at,
               j.cancel_requested_at, j.side_effect_started_at, j.deadline_at, j.hold_until,
               j.id in (select job_id from rejected) as recently_rejected
        from tool_jobs j
        where j.state in ('running', 'cancel_requested', 'outcome_unknown')
        union all
        select j.id, j.tool, j.state, j.created_at, j.claimed_at, j.lease_until, j.heartbeat_at,
               j.cancel_requested_at, j.side_effect_started_at, j.deadline_at, j.hold_until, true
        from rejected r
        join tool_jobs j on j.id = r.job_id
        where j.state not in ('running', 'cancel_requested', 'outcome_unknown')
    ) j
    join cutoffs k on k.tool = j.tool
),
counts as (
    select count(*) filter (where state = 'outcome_unknown') as needs_human,
           count(*) filter (where health = 'heartbeat_late') as stale_heartbeats,
           count(*) filter (where health in ('lease_expired', 'past_deadline', 'past_max_hold')) as expired_unswept,
           count(*) filter (where health = 'past_deadline') as past_deadline,
           count(*) filter (where health = 'cancel_unheard') as cancel_unheard,
           count(*) filter (where health = 'over_stage_timeout') as over_stage_timeout,
           count(*) filter (where state = 'running') as running,
           count(*) filter (where state = 'cancel_requested') as cancel_requested,
           (select count(*) from tool_jobs where state = 'queued') as queued,
           (select count(*) from tool_jobs
            where state = 'failed' and finished_at > (select now from clock) - interval '1 hour') as failed_last_hour,
           (select count(*) from rejected) as zombies,
           (select now from clock) as counted_at
    from live
    where state in ('running', 'cancel_requested', 'outcome_unknown')
),
ranked as (
    select l.id, l.health,
           row_number() over (order by leasectl_health_rank(l.health),
                                       case l.health
                                           when 'lease_expired' then l.lease_until
                                           when 'past_deadline' then l.deadline_at
                                           when 'past_max_hold' then l.hold_until
                                           when 'cancel_unheard' then l.cancel_requested_at
                                           when 'heartbeat_late' then l.heartbeat_at
                                           when 'over_stage_timeout' then l.claimed_at
                                           when 'outcome_unknown' then coalesce(l.side_effect_started_at, l.created_at)
                                           else l.created_at
                                       end,
                                       l.id) as position
    from live l
    where l.health <> 'healthy'
),
-- wide: the display columns, only for the calls that will be shown
worst as (
    select j.id, j.tool, t.side_effect, j.state, j.owner_id, j.fencing_token, j.attempt,
           t.max_attempts + j.extra_attempts as max_attempts, j.idempotency_key, j.agent_id,
           j.created_at, j.claimed_at, j.heartbeat_at, j.lease_until, j.deadline_at,
           j.cancel_requested_at, j.cancel_requested_by, j.side_effect_started_at,
           j.external_request_id, j.finished_at, j.completed_despite_cancel, j.model, j.provider,
           j.session_id, j.parent_id, j.chain_id, j.stage, j.priority, j.accepted_at, j.trace_id,
           t.lease_seconds, t.heartbeat_seconds, t.jitter_seconds, t.stage_timeout_seconds, r.health,
           extract(epoch from clock.now - j.heartbeat_at)::float8 as heartbeat_age_seconds,
           extract(epoch from j.lease_until - clock.now)::float8 as lease_left_seconds,
           extract(epoch from j.deadline_at - clock.now)::float8 as deadline_left_seconds,
           r.position
    from ranked r
    join tool_jobs j on j.id = r.id
    join tools t on t.name = j.tool
    cross join clock
    where r.position <= :limit::integer
)
select c.*, w.*, c.counted_at as db_now
from counts c
left join worst w on true
order by w.position
