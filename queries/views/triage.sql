-- Purpose: everything the triage screen shows: the counts that matter at 02:00 and the calls that
--   need attention, worst first. Every live call whose lease health (leasectl_job_health) is not
--   healthy, plus finished calls where a stale-token write was rejected in the last five minutes
--   (a zombie worker is still out there).
--   One pass over the live calls (sweep), then exact health for the few it could not settle:
--     sweep  reads each live call once (the partial index on live states) and settles the
--            running calls that are plainly healthy: lease and deadline ahead, heartbeat and
--            stage within their tool's cutoffs -- leasectl_job_health's 'healthy' for a running
--            call, written out so that no row is joined or deformed past the columns it needs. A
--            call within every tool's cutoffs is settled without looking its tool up; only one
--            past the strictest (a heartbeat of a slower tool) is looked up, in hashed sets of
--            (tool, class of its time) that are within the tool's cutoff: one probe whatever the
--            number of tools. Whatever it cannot settle (null included) goes to live.
--            Not read: hold_until, the table's last column (reaching it for every call costs the
--            pass half as much again): a lease never outlasts its hold (tool_jobs_lease_bounded:
--            lease_until <= hold_until), so a lease still ahead is a hold still ahead. This copy
--            of the rule is held to the rule by tests/db/test_triage_sweep.py. What it keeps of
--            every call it did not settle is the row's address (ctid), for a TID scan in the same
--            snapshot; of the others, only how many there are.
--     live   the unsettled calls and the recently rejected ones (the partial index on recent
--            rejected writes), each with leasectl_job_health itself: what is not healthy there is
--            the attention list, and the count of each health comes from there.
--   Healthy running calls are counted, never kept, sorted or joined: the cost follows the live
--   calls once, and the sort and the joins follow the calls that need attention (worst first, a
--   bounded top-N of `limit`). Tool cutoffs and the clock are computed once per query.
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
-- the strictest cutoffs of any tool (a call within them is within its own tool's), and the
-- distinct cutoffs of all tools, ascending: a time's class is how many of them it is not before
-- (width_bucket), and a call is within its tool's cutoff when its class reaches the cutoff's place
bounds as materialized (
    select max(late_before) as late_before, max(stage_before) as stage_before,
           array_agg(distinct late_before order by late_before) as late_befores,
           array_agg(distinct stage_before order by stage_before)
               filter (where stage_before is not null) as stage_befores
    from cutoffs
),
-- (tool, class of a heartbeat) that is on time for that tool
heartbeat_in_time as materialized (
    select k.tool, class
    from cutoffs k, bounds b,
         generate_series(array_position(b.late_befores, k.late_before), cardinality(b.late_befores)) class
),
-- (tool, class of a claim) within that tool's stage timeout (every class, for a tool without one)
stage_in_time as materialized (
    select k.tool, class
    from cutoffs k, bounds b,
         generate_series(coalesce(array_position(b.stage_befores, k.stage_before), 0),
                         coalesce(cardinality(b.stage_befores), 0)) class
),
rejected as materialized (
    select distinct job_id
    from job_events
    where kind in ('heartbeat_lost', 'result_rejected', 'receiver_rejected')
      and at > (select now from clock) - interval '5 minutes'
),
sweep as materialized (
    select count(*) as live,
           array_agg(j.ctid) filter (where (
               j.state = 'running'
               and j.lease_until > (select now from clock)
               and (j.deadline_at <= (select now from clock)) is not true
               and ((j.heartbeat_at < (select late_before from bounds)) is not true
                    or (j.tool, width_bucket(j.heartbeat_at, (select late_befores from bounds)))
                       in (select tool, class from heartbeat_in_time))
               and ((j.claimed_at < (select stage_before from bounds)) is not true
                    or (j.tool, coalesce(width_bucket(j.claimed_at, (select stage_befores from bounds)), 0))
                       in (select tool, class from stage_in_time))
           ) is not true) as unsettled
    from tool_jobs j
    where j.state in ('running', 'cancel_requested', 'outcome_unknown')
),
-- narrow: only what decides health and order, for the calls the sweep did not settle
live as materialized (
    select j.id, j.state, j.created_at, j.claimed_at, j.lease_until, j.heartbeat_at,
           j.cancel_requested_at, j.side_effect_started_at, j.deadline_at, j.hold_until,
           leasectl_job_health(j.state, j.lease_until, j.heartbeat_at, j.cancel_requested_at,
                               j.claimed_at, k.late_before, k.unheard_before, k.stage_before,
                               j.recently_rejected, k.now, j.deadline_at, j.hold_until) as health
    from (
        select j.id, j.tool, j.state, j.created_at, j.claimed_at, j.lease_until, j.heartbeat_at,
               j.cancel_requested_at, j.side_effect_started_at, j.deadline_at, j.hold_until,
               false as recently_rejected
        from tool_jobs j
        -- the very rows the sweep read (same snapshot), by address: nothing here for the planner
        -- to prefer an index scan over the live calls for, whatever its statistics say
        where j.ctid = any((select unsettled from sweep)::tid[])
          and j.id not in (select job_id from rejected)
        union all
        -- live or finished, settled or not: a recent rejection decides (zombie, unless worse)
        select j.id, j.tool, j.state, j.created_at, j.claimed_at, j.lease_until, j.heartbeat_at,
               j.cancel_requested_at, j.side_effect_started_at, j.deadline_at, j.hold_until, true
        from rejected r
        join tool_jobs j on j.id = r.job_id
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
           -- the settled calls are running ones; every other live call is here
           (select live from sweep) - count(*) + count(*) filter (where state = 'running') as running,
           count(*) filter (where state = 'cancel_requested') as cancel_requested,
           -- in the queue's order: its partial index is the way whatever the statistics say
           -- (analysed before a burst of claims they count every call queued, and a plain count
           -- would then read the whole table, in parallel)
           (select count(*) from (select 1 from tool_jobs where state = 'queued'
                                  order by priority desc, created_at) q) as queued,
           (select count(*) from tool_jobs
            where state = 'failed' and finished_at > (select now from clock) - interval '1 hour') as failed_last_hour,
           (select count(*) from rejected) as zombies,
           (select now from clock) as counted_at
    from live
    where state in ('running', 'cancel_requested', 'outcome_unknown')
),
ranked as (
    select l.id, l.health, row_number() over (order by l.rank, l.since, l.id) as position
    from (
        select l.id, l.health, leasectl_health_rank(l.health) as rank,
               case l.health
                   when 'lease_expired' then l.lease_until
                   when 'past_deadline' then l.deadline_at
                   when 'past_max_hold' then l.hold_until
                   when 'cancel_unheard' then l.cancel_requested_at
                   when 'heartbeat_late' then l.heartbeat_at
                   when 'over_stage_timeout' then l.claimed_at
                   when 'outcome_unknown' then coalesce(l.side_effect_started_at, l.created_at)
                   else l.created_at
               end as since
        from live l
        where l.health <> 'healthy'
        order by rank, since, l.id
        limit greatest(:limit::integer, 0)
    ) l
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
)
select c.*, w.*, c.counted_at as db_now
from counts c
left join worst w on true
order by w.position
