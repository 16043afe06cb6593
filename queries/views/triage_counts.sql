-- Purpose: the counts that matter at 02:00, for the triage strip. Exact for live calls (through
--   the partial indexes on live and queued states), bounded by time for failures; never a
--   count over the whole history.
-- Zero rows: never (one row of counts).
-- Parameters: none
with live as (
    select leasectl_job_health(j.state, j.lease_until, j.heartbeat_at, j.cancel_requested_at,
                               j.claimed_at, t.heartbeat_seconds, t.jitter_seconds,
                               t.stage_timeout_seconds, false, leasectl_now()) as health,
           j.state
    from tool_jobs j
    join tools t on t.name = j.tool
    where j.state in ('running', 'cancel_requested', 'outcome_unknown')
)
select count(*) filter (where state = 'outcome_unknown') as needs_human,
       count(*) filter (where health = 'heartbeat_late') as stale_heartbeats,
       count(*) filter (where health = 'lease_expired') as expired_unswept,
       count(*) filter (where health = 'cancel_unheard') as cancel_unheard,
       count(*) filter (where health = 'over_stage_timeout') as over_stage_timeout,
       count(*) filter (where state = 'running') as running,
       count(*) filter (where state = 'cancel_requested') as cancel_requested,
       (select count(*) from tool_jobs where state = 'queued') as queued,
       (select count(*) from tool_jobs
        where state = 'failed' and finished_at > leasectl_now() - interval '1 hour') as failed_last_hour,
       (select count(distinct job_id) from job_events
        where kind in ('heartbeat_lost', 'result_rejected', 'receiver_rejected')
          and at > leasectl_now() - interval '5 minutes') as zombies,
       leasectl_now() as db_now
from live
