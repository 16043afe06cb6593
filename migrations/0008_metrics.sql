-- 0008: metrics (issue 9): one definition of what each metric counts, and a rollup that keeps
-- Prometheus counters monotonic however long the history grows or whatever is pruned later.
--
-- Nothing is written for metrics on the hot path: no trigger, no column, no row per call or per
-- heartbeat. The metrics are read from what the protocol already writes -- the live calls (the
-- partial index tool_jobs_live_idx), the queue (tool_jobs_queued_idx), and the append-only history
-- (its primary key for the tail of the rollup; one partial index, job_events_metrics_idx below,
-- for a window: one index entry per claim and per request start, none per heartbeat, justified
-- where it is created; tests/bench/protocol.py, run before and after, measures it).
--
-- Counters (leasectl_*_total, the histograms' buckets, sums and counts) are totals over the whole
-- history. They never go backwards because:
--   * job_events is append-only (0001: UPDATE, DELETE and TRUNCATE are refused), so a count over
--     it can only grow;
--   * reading every event on every scrape would grow with the history, so whatever is older than
--     a minute or so is folded into leasectl_metric_totals (below) by leasectl_metrics_fold(),
--     called off the hot path by `leasectl metrics serve` (a background thread, every 30 s); a
--     scrape reads the totals plus the events after the fold's watermark, in one snapshot, so an
--     event is counted in exactly one of the two at any instant;
--   * the totals only grow (a trigger refuses a smaller count, a delete or a truncate);
--   * history pruning, if it is ever introduced, must call leasectl_metrics_fold() first and
--     delete only events with id <= leasectl_metric_folds.folded_through: what was counted stays
--     counted. The same holds for any cleanup of tool_jobs rows, which give the events their
--     tool, model and provider labels (folded events keep the labels they had).
--
-- Runnable with `psql -v ON_ERROR_STOP=1 -f` and by `leasectl migrate`.

-- ---------------------------------------------------------------------------------------
-- Histogram buckets, in seconds. Fixed forever: a bucket boundary that moves breaks every
-- cumulative series already scraped (add a new metric instead). prometheus_client's defaults stop
-- at 10 s; a tool call here waits in a queue or for its start confirmation for minutes, a long
-- report stage for hours.
create function leasectl_metric_buckets() returns float8[]
language sql immutable parallel safe as $$
    select array[0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600,
                 86400]::float8[]
$$;

comment on function leasectl_metric_buckets() is
    'Upper bounds (le) of the leasectl_*_seconds histograms; +Inf is implied. Never change them.';

-- The bucket an observation falls in: the smallest bound >= seconds (Prometheus' le), else
-- +Inf. Counters (no seconds) are stored under +Inf.
create function leasectl_metric_bucket(p_seconds float8) returns float8
language sql immutable parallel safe as $$
    select coalesce((select min(b) from unnest(public.leasectl_metric_buckets()) b where b >= p_seconds),
                    'Infinity'::float8)
$$;

-- ---------------------------------------------------------------------------------------
-- What each metric counts: one row per history event that a metric counts, with the call's
-- labels. One definition, used by the window of `leasectl metrics` and screen 7, by the tail of
-- a scrape and by the fold, so that they can never disagree. Both ranges are always given (ids
-- after p_after up to p_through, times after p_since up to p_until): the window uses the BRIN
-- index on `at`, the rollup's tail the primary key. Plain SQL, inlined into each caller.
--
--   renewal_failures        heartbeat_lost: a heartbeat answered with zero rows (seed 000)
--   reclaims                a lost lease taken over: `reclaimed` (a new owner took an expired
--                           lease), or the sweep putting a call whose lease had run out back in
--                           the queue (running -> queued after the lease's end; fail.sql can only
--                           requeue under a live lease, so this is the sweep)
--   stale_writes_rejected   result_rejected, receiver_rejected: a write with a stale token refused
--   lock_timeouts,          database errors by details.cause (seed 004): the worker's
--   statement_timeouts      database_error and an operator's operator_action_failed
--   queue_wait              a claim from the queue: seconds since the call entered the queue (its
--                           enqueue, or the requeue before this claim)
--   start_confirm           tool_request_started (side_effect_started before 0005): seconds since
--                           the claim that granted the same fencing token
--   outcome_unknown_entered a call going to outcome_unknown; outcome_unknown_left: leaving it
--                           (screen 7 rebuilds the hour's level of waiting calls from these)
create function leasectl_metric_events(p_after bigint, p_through bigint, p_since timestamptz,
                                       p_until timestamptz)
returns table (event_id bigint, job_id uuid, at timestamptz, metric text, seconds float8,
               tool text, model text, provider text)
language sql stable parallel safe as $$
    select e.id, e.job_id, e.at, k.metric,
           case k.metric
               when 'queue_wait' then greatest(0, extract(epoch from e.at - coalesce(
                   case when e.details ->> 'attempt' = '1' then j.created_at end,
                   (select max(p.at) from public.job_events p
                    where p.job_id = e.job_id and p.at <= e.at and p.id <> e.id and p.state_to = 'queued'
                      and p.kind in ('enqueued', 'state_changed')),
                   j.created_at)))
               when 'start_confirm' then greatest(0, extract(epoch from e.at - coalesce(
                   case when j.fencing_token = e.fencing_token then j.claimed_at end,
                   (select max(p.at) from public.job_events p
                    where p.job_id = e.job_id and p.at <= e.at and p.id <> e.id
                      and p.kind in ('claimed', 'reclaimed')
                      and p.fencing_token = e.fencing_token))))
           end::float8,  -- null for a counted event
           j.tool, j.model, j.provider
    from public.job_events e
    cross join lateral (
        select case
            when e.kind = 'heartbeat_lost' then 'renewal_failures'
            when e.kind in ('result_rejected', 'receiver_rejected') then 'stale_writes_rejected'
            when e.kind = 'reclaimed' then 'reclaims'
            when e.kind = 'state_changed' and e.state_from = 'running' and e.state_to = 'queued'
                 and (e.details ->> 'previous_lease_until')::timestamptz < e.at then 'reclaims'
            when e.kind = 'state_changed' and e.state_to = 'outcome_unknown'
                 and e.state_from is distinct from 'outcome_unknown' then 'outcome_unknown_entered'
            when e.kind = 'state_changed' and e.state_from = 'outcome_unknown'
                 and e.state_to is distinct from 'outcome_unknown' then 'outcome_unknown_left'
            when e.kind in ('database_error', 'operator_action_failed')
                 and e.details ->> 'cause' = 'lock_timeout' then 'lock_timeouts'
            when e.kind in ('database_error', 'operator_action_failed')
                 and e.details ->> 'cause' = 'statement_timeout' then 'statement_timeouts'
            when e.kind = 'claimed' then 'queue_wait'
            when e.kind in ('tool_request_started', 'side_effect_started') then 'start_confirm'
        end as metric
    ) k
    left join public.tool_jobs j on j.id = e.job_id
    where e.id > p_after and e.id <= p_through
      and e.at > p_since and e.at <= p_until
      -- the predicate of job_events_metrics_idx, word for word (the planner matches it)
      and (e.kind in ('heartbeat_lost', 'result_rejected', 'receiver_rejected', 'reclaimed', 'database_error',
                      'operator_action_failed', 'claimed', 'tool_request_started', 'side_effect_started')
           or (e.kind = 'state_changed'
               and (e.state_from = 'outcome_unknown' or e.state_to in ('queued', 'outcome_unknown'))))
      and k.metric is not null
$$;

-- The window of `leasectl metrics` and screen 7 (the last hour, by default) reads the counted
-- events of that window through this index, whatever the size of the history and however it
-- lies on disk. (The BRIN index on `at` of 0001 serves that only while the history is stored in
-- time order; a history loaded or restored out of order -- the console benchmark's is -- turns
-- every window into a scan of the whole table.)
-- Against the write path: no heartbeat writes an event, so a heartbeat never touches it; a call
-- adds one entry (its claim) plus one per external request it starts; rare events (a lost
-- heartbeat, a refused write, a reclaim, a requeue, an unknown outcome, a timeout) one each. The
-- completions, enqueues and state changes that make most of the history are not in it. It is on
-- job_events, not tool_jobs: heartbeats stay HOT. The key is `at`, always now() at insert, so
-- entries go to the right edge of the tree. Measured with tests/bench/protocol.py before and after
-- (README). Built here without CONCURRENTLY (a migration is one transaction): on a large history
-- it holds inserts into job_events for the time of the build.
create index job_events_metrics_idx on job_events (at)
    where kind in ('heartbeat_lost', 'result_rejected', 'receiver_rejected', 'reclaimed', 'database_error',
                   'operator_action_failed', 'claimed', 'tool_request_started', 'side_effect_started')
       or (kind = 'state_changed'
           and (state_from = 'outcome_unknown' or state_to in ('queued', 'outcome_unknown')));

-- ---------------------------------------------------------------------------------------
-- The rollup: totals of folded events, per metric, labels and bucket (counters under +Inf).
-- '' stands for a missing label (a call with no model, an event whose call is gone).
create table leasectl_metric_totals (
    metric    text not null,
    tool      text not null,
    model     text not null,
    provider  text not null,
    le        float8 not null,
    n         bigint not null check (n >= 0),
    seconds   float8 not null default 0,
    primary key (metric, tool, model, provider, le)
);

comment on table leasectl_metric_totals is
    'Metric totals of history events folded by leasectl_metrics_fold(); they only grow.';

-- Where the fold stands. folded_through: every event with a smaller or equal id is in the totals.
-- candidate: the next watermark (the newest event id visible when it was proposed, at
-- candidate_at, by the transaction candidate_xmax); it is folded once every transaction that could
-- still add an event at or below it has ended (a snapshot's xmin has passed candidate_xmax) and the
-- lag (a minute) has passed. The one gap: an insert that took its id before the proposal but gets
-- its transaction id after it (microseconds inside one INSERT, between the identity default and
-- the row) and is still running a minute later; such an event would be missed (never counted),
-- which can make a counter short by one, never go backwards.
create table leasectl_metric_folds (
    singleton       boolean primary key default true check (singleton),
    folded_through  bigint not null default 0,
    candidate       bigint,
    candidate_xmax  xid8,
    candidate_at    timestamptz,
    folded_at       timestamptz
);

insert into leasectl_metric_folds default values;

create function leasectl_metric_totals_only_grow() returns trigger
language plpgsql as $$
begin
    if tg_op = 'UPDATE' and new.n >= old.n and new.seconds >= old.seconds
       and (new.metric, new.tool, new.model, new.provider, new.le)
           = (old.metric, old.tool, old.model, old.provider, old.le) then
        return new;
    end if;
    raise exception 'leasectl_metric_totals only grow: % is refused', tg_op using errcode = 'LCH01';
end $$;

create trigger leasectl_metric_totals_grow
    before update or delete on leasectl_metric_totals
    for each row execute function leasectl_metric_totals_only_grow();

create trigger leasectl_metric_totals_no_truncate
    before truncate on leasectl_metric_totals
    for each statement execute function leasectl_metric_totals_only_grow();

-- Fold what is safely behind us into the totals, then propose the next watermark. Idempotent and
-- safe to call from several exporters at once (the one that holds the row folds, the others
-- skip). Returns how many events it folded and the watermark it left.
create function leasectl_metrics_fold(p_lag interval default interval '60 seconds')
returns table (folded bigint, folded_through bigint)
language plpgsql security definer set search_path = pg_catalog, public as $$
declare
    s       public.leasectl_metric_folds;
    v_snap  pg_snapshot := pg_current_snapshot();
    v_n     bigint := 0;
begin
    select * into s from public.leasectl_metric_folds for update skip locked;
    if not found then  -- another fold is running
        return query select 0::bigint, f.folded_through from public.leasectl_metric_folds f;
        return;
    end if;
    if s.candidate is not null and s.candidate > s.folded_through
       and s.candidate_at <= now() - p_lag and pg_snapshot_xmin(v_snap) >= s.candidate_xmax then
        with folded as (
            select m.metric, coalesce(m.tool, '') as tool, coalesce(m.model, '') as model,
                   coalesce(m.provider, '') as provider, public.leasectl_metric_bucket(m.seconds) as le,
                   count(*) as n, coalesce(sum(m.seconds), 0) as seconds
            from public.leasectl_metric_events(s.folded_through, s.candidate, '-infinity', 'infinity') m
            group by 1, 2, 3, 4, 5
        ),
        upsert as (
            insert into public.leasectl_metric_totals as t (metric, tool, model, provider, le, n, seconds)
            select metric, tool, model, provider, le, n, seconds from folded
            on conflict (metric, tool, model, provider, le)
            do update set n = t.n + excluded.n, seconds = t.seconds + excluded.seconds
        )
        -- (a data-modifying WITH runs exactly once, whether or not the query reads it)
        select coalesce(sum(n), 0) into v_n from folded;
        s.folded_through := s.candidate;
        s.folded_at := now();
        s.candidate := null;
    end if;
    if s.candidate is null or s.candidate <= s.folded_through then
        s.candidate := greatest(s.folded_through, coalesce((select max(id) from public.job_events), 0));
        -- this transaction's own id: greater than that of every transaction that had one before
        -- now (a snapshot's xmax is not: it is only the newest completed id plus one)
        s.candidate_xmax := pg_current_xact_id();
        s.candidate_at := now();
    end if;
    update public.leasectl_metric_folds f
    set folded_through = s.folded_through, candidate = s.candidate, candidate_xmax = s.candidate_xmax,
        candidate_at = s.candidate_at, folded_at = s.folded_at;
    return query select v_n, s.folded_through;
end $$;

comment on function leasectl_metrics_fold(interval) is
    'Fold history events older than the lag into leasectl_metric_totals (off the hot path: the exporter calls it).';

-- ---------------------------------------------------------------------------------------
-- Who may read and fold. Reading needs SELECT (every group but the worker reads metrics); the
-- fold writes only derived totals, through the function above: the control plane and operators
-- may run it, the auditor stays read-only by GRANT.
revoke all on leasectl_metric_totals, leasectl_metric_folds from public;
revoke execute on function leasectl_metrics_fold(interval) from public;

do $$
declare
    r text;
begin
    foreach r in array array['leasectl_operator', 'leasectl_auditor', 'leasectl_supervisor'] loop
        if exists (select 1 from pg_roles where rolname = r) then
            execute format('grant select on leasectl_metric_totals, leasectl_metric_folds to %I', r);
        end if;
    end loop;
    foreach r in array array['leasectl_operator', 'leasectl_supervisor'] loop
        if exists (select 1 from pg_roles where rolname = r) then
            execute format('grant execute on function leasectl_metrics_fold(interval) to %I', r);
        end if;
    end loop;
end $$;

insert into leasectl_migrations (version, name) values (8, '0008_metrics')
on conflict (version) do nothing;
