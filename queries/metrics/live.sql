-- Purpose: the gauges of `leasectl metrics serve`, from one pass over the calls that are not
--   finished (the partial indexes on live and on queued calls; finished history is never read):
--   per tool, model, provider and state, how many calls, the stalest heartbeat and the least
--   lease left among lease holders, expired leases, cancels unheard for longer than 2H + J, calls
--   running past their deadline (leasectl_job_health's past_deadline, migration 0014); each row
--   with its tool's service (tools.service, a label of the exporter).
--   Every registered tool has at least one row (with a null state when it has no such call), so
--   the exporter can say 0 for it instead of nothing.
-- Zero rows: no tool is registered.
-- Parameters: none
with clock as materialized (
    select leasectl_now() as now
),
cutoffs as materialized (
    select c.tool, c.unheard_before, clock.now from clock, leasectl_tool_cutoffs(clock.now) c
),
unfinished as (
    select j.tool, j.model, j.provider, j.state, j.heartbeat_at, j.lease_until, j.cancel_requested_at,
           j.deadline_at
    from tool_jobs j
    where j.state in ('running', 'cancel_requested', 'outcome_unknown')
    union all
    select j.tool, j.model, j.provider, j.state, null, null, null, null
    from tool_jobs j
    where j.state = 'queued'
),
grouped as (
    select u.tool, u.model, u.provider, u.state, count(*) as calls,
           max(extract(epoch from k.now - u.heartbeat_at)) filter (where u.state in ('running', 'cancel_requested'))
               as oldest_heartbeat_age_seconds,
           min(extract(epoch from u.lease_until - k.now)) filter (where u.state in ('running', 'cancel_requested'))
               as min_lease_left_seconds,
           count(*) filter (where u.state in ('running', 'cancel_requested') and u.lease_until < k.now)
               as expired_leases,
           count(*) filter (where u.state = 'cancel_requested' and u.cancel_requested_at < k.unheard_before)
               as cancel_unheard,
           count(*) filter (where u.state in ('running', 'cancel_requested') and u.deadline_at <= k.now)
               as past_deadline
    from unfinished u
    join cutoffs k on k.tool = u.tool
    group by u.tool, u.model, u.provider, u.state
)
select t.name as tool, t.side_effect, t.service, g.model, g.provider, g.state, coalesce(g.calls, 0) as calls,
       g.oldest_heartbeat_age_seconds::float8 as oldest_heartbeat_age_seconds,
       g.min_lease_left_seconds::float8 as min_lease_left_seconds,
       coalesce(g.expired_leases, 0) as expired_leases, coalesce(g.cancel_unheard, 0) as cancel_unheard,
       coalesce(g.past_deadline, 0) as past_deadline,
       (select now from clock) as db_now
from tools t
left join grouped g on g.tool = t.name
order by t.name, g.model, g.provider, g.state
