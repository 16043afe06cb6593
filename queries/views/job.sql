-- Purpose: one call with everything known about it: every column, its tool's class and lease
--   sizing, derived ages from the database's (display) clock, and its lease health.
-- Zero rows: no such call.
-- Parameters: job_id
select j.*,
       t.side_effect, t.lease_seconds, t.heartbeat_seconds, t.missed_heartbeats, t.jitter_seconds,
       t.stage_timeout_seconds,
       t.max_attempts + j.extra_attempts as max_attempts,
       pg_column_size(j.payload) as payload_size,
       leasectl_now() as db_now,
       extract(epoch from leasectl_now() - j.heartbeat_at)::float8 as heartbeat_age_seconds,
       extract(epoch from j.lease_until - leasectl_now())::float8 as lease_left_seconds,
       extract(epoch from j.deadline_at - leasectl_now())::float8 as deadline_left_seconds,
       leasectl_job_health(j.state, j.lease_until, j.heartbeat_at, j.cancel_requested_at,
                           j.claimed_at, k.late_before, k.unheard_before, k.stage_before,
                           r.recent, leasectl_now()) as health
from tool_jobs j
join tools t on t.name = j.tool
join leasectl_tool_cutoffs(leasectl_now()) k on k.tool = j.tool
cross join lateral (
    select exists (
        select 1 from job_events e
        where e.job_id = j.id
          and e.kind in ('heartbeat_lost', 'result_rejected', 'receiver_rejected')
          and e.at > leasectl_now() - interval '5 minutes'
    ) as recent
) r
where j.id = :job_id::uuid
