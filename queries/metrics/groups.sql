-- Purpose: `leasectl metrics` and screen 7: one row per group (a tool, a model, a provider or
--   the external service a tool calls -- tools.service, migration 0014 -- as :by says) with the
--   seeds' minimum metrics. Live values come from one pass over the live
--   calls (the partial index on live states) with the tools' cutoffs computed once (as triage
--   does): running calls, the stalest heartbeat and the least lease left among the calls that
--   hold a lease, expired leases nobody reclaimed or swept yet, cancels unheard for longer than
--   2H + J, calls waiting in outcome_unknown, calls running past their deadline (past_deadline).
--   Window values are the history events of the last
--   :window_seconds (leasectl_metric_events, migration 0008, through its partial index on the
--   counted events' `at`, so the cost follows the window, not the history): renewal failures, reclaims, stale writes refused, lock
--   and statement timeouts kept apart, and the p50/p95 of queue wait, of start confirmation and of
--   accept wait (the same claims as queue wait, from the call's acceptance upstream, accepted_at).
--   By tool, every registered tool has a row, and by service every service a tool names; by model,
--   provider or service, a call without one is the null key. The clock is the display clock read by clock.sql in the same snapshot (:now), so the
--   window's bounds are values the planner sees.
-- Zero rows: no tool is registered (by tool), or nothing is live and nothing happened in the
--   window (by model or provider).
--   Every row also carries `minutes`, screen 7's sparklines from the same scan of the history:
--   [minutes ago (0 = the minute that ends now), metric, count, p95 seconds] for renewal failures,
--   reclaims, stale writes, queue wait and moves into and out of outcome_unknown over the last
--   :minutes minutes, all groups together.
-- Parameters: now (clock.sql), window_seconds (the window's length), by (tool, model, provider or
--   service), minutes (how many minutes of sparklines)
with clock as materialized (
    select :now::timestamptz as now
),
cutoffs as materialized (
    select c.tool, c.unheard_before, clock.now, t.service
    from clock, leasectl_tool_cutoffs(clock.now) c
    join tools t on t.name = c.tool
),
live as (
    select case :by::text when 'tool' then j.tool when 'model' then j.model when 'service' then k.service
                          else j.provider end as key,
           j.state, j.heartbeat_at, j.lease_until, j.cancel_requested_at, j.deadline_at, k.unheard_before, k.now
    from tool_jobs j
    join cutoffs k on k.tool = j.tool
    where j.state in ('running', 'cancel_requested', 'outcome_unknown')
),
live_groups as (
    select key,
           count(*) filter (where state = 'running') as running,
           max(extract(epoch from now - heartbeat_at)) filter (where state in ('running', 'cancel_requested'))
               as oldest_heartbeat_age_seconds,
           min(extract(epoch from lease_until - now)) filter (where state in ('running', 'cancel_requested'))
               as min_lease_left_seconds,
           count(*) filter (where state in ('running', 'cancel_requested') and lease_until < now) as expired_leases,
           count(*) filter (where state = 'cancel_requested' and cancel_requested_at < unheard_before)
               as cancel_unheard,
           count(*) filter (where state = 'outcome_unknown') as outcome_unknown,
           -- leasectl_job_health's past_deadline (migration 0014)
           count(*) filter (where state in ('running', 'cancel_requested') and deadline_at <= now) as past_deadline
    from live
    group by key
),
happened as materialized (
    select case :by::text when 'tool' then m.tool when 'model' then m.model when 'service' then s.service
                          else m.provider end as key,
           m.metric, m.seconds, m.at,
           floor(extract(epoch from :now::timestamptz - m.at) / 60)::integer as minutes_ago,
           -- a claim from the queue (queue_wait) waited this long since the call was accepted upstream
           greatest(0, extract(epoch from m.at - j.accepted_at))::float8 as accept_seconds
    from leasectl_metric_events(0, 9223372036854775807,
                                :now::timestamptz - greatest(:window_seconds::float8, :minutes::integer * 60)
                                                    * interval '1 second',
                                :now::timestamptz) m
    left join tools s on :by::text = 'service' and s.name = m.tool
    left join tool_jobs j on m.metric = 'queue_wait' and j.id = m.job_id
),
-- screen 7's sparklines, from the same scan: per minute of the last :minutes, over all groups
minute_rows as (
    select minutes_ago, metric, count(*) as n, percentile_cont(0.95) within group (order by seconds) as p95
    from happened
    where minutes_ago < :minutes::integer
      and metric in ('renewal_failures', 'reclaims', 'stale_writes_rejected', 'queue_wait',
                     'outcome_unknown_entered', 'outcome_unknown_left')
    group by minutes_ago, metric
),
window_groups as (
    select key,
           count(*) filter (where metric = 'renewal_failures') as renewal_failures,
           count(*) filter (where metric = 'reclaims') as reclaimed,
           count(*) filter (where metric = 'stale_writes_rejected') as stale_writes_rejected,
           count(*) filter (where metric = 'lock_timeouts') as lock_timeouts,
           count(*) filter (where metric = 'statement_timeouts') as statement_timeouts,
           percentile_cont(0.5) within group (order by seconds) filter (where metric = 'queue_wait') as queue_wait_p50,
           percentile_cont(0.95) within group (order by seconds) filter (where metric = 'queue_wait') as queue_wait_p95,
           percentile_cont(0.5) within group (order by seconds) filter (where metric = 'start_confirm')
               as start_confirm_p50,
           percentile_cont(0.95) within group (order by seconds) filter (where metric = 'start_confirm')
               as start_confirm_p95,
           percentile_cont(0.5) within group (order by accept_seconds) filter (where metric = 'queue_wait')
               as accept_wait_p50,
           percentile_cont(0.95) within group (order by accept_seconds) filter (where metric = 'queue_wait')
               as accept_wait_p95
    from happened
    where metric in ('renewal_failures', 'reclaims', 'stale_writes_rejected', 'lock_timeouts', 'statement_timeouts',
                     'queue_wait', 'start_confirm')
      and at > :now::timestamptz - :window_seconds::float8 * interval '1 second'  -- the window, not the sparklines'
    group by key
),
keys as (
    select key from live_groups
    union
    select key from window_groups
    union
    select name from tools where :by::text = 'tool'
    union
    select service from tools where :by::text = 'service' and service is not null
)
select k.key,
       coalesce(l.running, 0) as running,
       l.oldest_heartbeat_age_seconds::float8 as oldest_heartbeat_age_seconds,
       l.min_lease_left_seconds::float8 as min_lease_left_seconds,
       coalesce(l.expired_leases, 0) as expired_leases,
       coalesce(w.renewal_failures, 0) as renewal_failures,
       coalesce(w.reclaimed, 0) as reclaimed,
       coalesce(w.stale_writes_rejected, 0) as stale_writes_rejected,
       w.queue_wait_p50, w.queue_wait_p95, w.start_confirm_p50, w.start_confirm_p95,
       w.accept_wait_p50, w.accept_wait_p95,
       coalesce(l.cancel_unheard, 0) as cancel_unheard,
       coalesce(l.outcome_unknown, 0) as outcome_unknown,
       coalesce(l.past_deadline, 0) as past_deadline,
       coalesce(w.lock_timeouts, 0) as lock_timeouts,
       coalesce(w.statement_timeouts, 0) as statement_timeouts,
       clock.now as at,
       (select coalesce(jsonb_agg(jsonb_build_array(minutes_ago, metric, n, p95)), '[]'::jsonb) from minute_rows)
           as minutes
from keys k
left join live_groups l on l.key is not distinct from k.key
left join window_groups w on w.key is not distinct from k.key
cross join clock
order by k.key nulls last
