-- 0029: the write path parses less per statement (issues 25, 27: the reference worker's server
-- instructions per call; README, "What each statement parses again").
--
-- PostgreSQL keeps no table's CHECK constraints or trigger WHEN clauses ready between statements: the
-- first row each statement writes reads them back from their stored node strings, plans and
-- compiles them (ExecRelCheck, TriggerEnabled). A claim and a completion are one-row statements, and
-- the journal trigger's two inserts per call are statements of their own (SPI): that work was a
-- quarter of the server's instructions per call. Three changes, each rule kept where it was judged:
--
--   tool_jobs' two checks      tool_jobs_lease_bounded's condition and tool_jobs_extra_attempts_check
--                              written once in a function one check calls
--                              (leasectl_tool_jobs_bounded): the check's stored form is one call of
--                              six columns (the inline conditions, planned again per statement,
--                              cost ~115 k instructions; the call ~40 k, and ~1.7 us more per row a
--                              bulk heartbeat renews, measured on PostgreSQL 15). The same rows
--                              refused, under the same names and SQLSTATE 23514 (a null passes).
--   job_events' bounds         the kind's spelling, the actor's 200 and the reason's 1000
--                              characters, as checks of every row, two per call: judged now by the
--                              journal's guard (leasectl_job_events_kind_guard), first thing, for
--                              every row, the owner's too, and refused under the same constraint
--                              names and SQLSTATE. The guard runs for every row (no WHEN clause):
--                              its WHEN clause, parsed again for each journal row, cost more than
--                              the call it let pass by, and the guard already set the time and the
--                              role that clause compared.
--   the lease watch's WHEN     new.state = 'running' dropped from it: a lease that ends sooner on
--                              a call that is not running lowers the watch too, which only makes
--                              the next claim look for expired leases once (safe: the watch is a
--                              lower bound, migration 0020).
--
-- Measured (callgrind, server instructions per call of the reference worker, 500 -> 2,500 no-op
-- calls, one session): 2.43 M before, 2.11 M after (0013's schema and SQL: 1.99 M).

create function public.leasectl_tool_jobs_bounded(p_lease_until timestamptz, p_heartbeat_at timestamptz,
                                                  p_deadline_at timestamptz, p_hold_until timestamptz,
                                                  p_state text, p_extra_attempts integer) returns boolean
language plpgsql stable set search_path = pg_catalog, public, pg_temp as $$
begin
    -- 0001's tool_jobs_extra_attempts_check, refused under its own name
    if p_extra_attempts < 0 then
        raise exception 'new row for relation "tool_jobs" violates check constraint "tool_jobs_extra_attempts_check"'
            using errcode = 'check_violation', constraint = 'tool_jobs_extra_attempts_check',
                  schema = 'public', table = 'tool_jobs';
    end if;
    -- 0016's condition, word for word: a running call has a lease; a lease is finite, ends within a
    -- day and no later than the deadline or the hold; a heartbeat is finite and within its lease
    return isfinite(p_lease_until) and isfinite(p_heartbeat_at) and p_heartbeat_at <= p_lease_until
           and p_lease_until <= least(p_deadline_at, p_hold_until, now() + interval '1 day')
           and (p_lease_until is not null or p_state not in ('running', 'cancel_requested'));
end $$;

alter table public.tool_jobs
    drop constraint tool_jobs_extra_attempts_check,
    drop constraint tool_jobs_lease_bounded,
    add constraint tool_jobs_lease_bounded
        check (public.leasectl_tool_jobs_bounded(lease_until, heartbeat_at, deadline_at, hold_until, state,
                                                 extra_attempts)) not valid;

create or replace function public.leasectl_job_events_kind_guard()
returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    -- (0029) the bounds of every row, the database's own too: checks until 0028
    if new.kind !~ '^[a-z][a-z0-9_]*$' then
        raise exception 'new row for relation "%" violates check constraint "job_events_kind_check"', tg_table_name
            using errcode = 'check_violation', constraint = 'job_events_kind_check',
                  schema = tg_table_schema, table = tg_table_name;
    end if;
    if length(new.actor) > 200 then
        raise exception 'new row for relation "%" violates check constraint "job_events_actor_bounded"', tg_table_name
            using errcode = 'check_violation', constraint = 'job_events_actor_bounded',
                  schema = tg_table_schema, table = tg_table_name;
    end if;
    if length(new.reason) > 1000 then
        raise exception 'new row for relation "%" violates check constraint "job_events_reason_bounded"', tg_table_name
            using errcode = 'check_violation', constraint = 'job_events_reason_bounded',
                  schema = tg_table_schema, table = tg_table_name;
    end if;
    new.at := now();
    new.db_role := session_user;
    if current_user = public.leasectl_schema_owner() then
        return new;
    end if;
    -- (0015) a row's details stay within 64 KiB, as text (pg_column_size would count a value read
    -- from a table at its compressed size)
    if octet_length(new.details::text) > 65536 then
        raise exception 'the details of a journal row stay within 64 KiB' using errcode = 'check_violation',
            constraint = 'job_events_details_bounded';
    end if;
    -- Ownership and state kinds are the tool_jobs triggers' alone, and so is side_effect_started
    -- (the trigger's name for the start of a request before 0005). tool_request_started, the
    -- seed's name the trigger uses now, stays a worker kind as well: a worker reports the start
    -- of a request that marks no side effect (a read-only tool) with it, under the rule below.
    -- (0015) and side_effect_checked, the journal of a check (worker/record_check.sql), which
    -- 0014 refused in a trigger of its own: one WHEN clause less on every row of the journal
    if new.kind in ('enqueued', 'claimed', 'reclaimed', 'state_changed', 'fenced',
                    'side_effect_started', 'side_effect_checked') then
        if current_user = (select pg_get_userbyid(relowner) from pg_catalog.pg_class where oid = tg_relid) then
            return new;  -- the owner, renamed or replaced since 0005 baked its name in
        end if;
        raise exception 'event kind % is written by the database itself', new.kind
            using errcode = 'LCH02';
    end if;
    if public.leasectl_is_exempt() then
        return new;
    end if;
    -- An operator kind is journaled by the statement that took the action (the functions below
    -- run as the owner and were returned above): a bare insert is a forged decision.
    -- (0013) any kind that reads as an operator's (operatorapprove_retry too)
    if new.kind like 'operator%' then
        raise exception 'only an operator statement (queries/operator/) may record %', new.kind
            using errcode = 'LCH02';
    end if;
    -- A worker event (tool_request_started, heartbeat_lost, result_rejected, ownership_unknown,
    -- receiver_rejected, or any other) speaks for the call under one fencing token. Its writer
    -- must be who it says it is, and must have held the call under that token: heartbeat_lost is
    -- written *after* the lease was lost, so "owns it now" would be the wrong test; "was granted
    -- it" (a claim or reclaim with that token to that owner id) is the right one.
    if new.actor is null or not public.leasectl_worker_id_bound(new.actor) then
        raise exception 'event % names actor %: login % may record events only as % or %:<name>',
            new.kind, coalesce(new.actor, '(none)'), session_user, session_user, session_user
            using errcode = 'LCH03';
    end if;
    -- It reports, it does not change anything: the state and ownership columns belong to the
    -- triggers' kinds (audit rebuilds ownership from them), and a request id to an operator's
    -- action (the console finds its refusal by it).
    -- (0013) and neither a reason (an operator's) nor a lease (the database's) goes with it
    if num_nonnulls(new.state_from, new.state_to, new.owner_from, new.owner_to, new.request_id, new.reason,
                    new.lease_until) > 0 then
        raise exception 'event % is a report: state_from, state_to, owner_from, owner_to, lease_until, reason and request_id are the database''s and the operators''',
            new.kind using errcode = 'LCH03';
    end if;
    if not exists (select 1 from public.job_events e
                   where e.job_id = new.job_id
                     and e.kind in ('claimed', 'reclaimed')
                     and e.fencing_token = new.fencing_token
                     and e.owner_to = new.actor) then
        raise exception '% never held call % under fencing token %: it may not record % for it',
            new.actor, new.job_id, coalesce(new.fencing_token::text, '(none)'), new.kind
            using errcode = 'LCH03';
    end if;
    return new;
end $$;

alter table public.job_events
    drop constraint job_events_kind_check,
    drop constraint job_events_actor_bounded,
    drop constraint job_events_reason_bounded;

-- on the partitioned table: PostgreSQL drops and clones it on every partition
drop trigger job_events_kind_guard on public.job_events;
create trigger job_events_kind_guard
    before insert on public.job_events
    for each row
    execute function public.leasectl_job_events_kind_guard();

drop trigger tool_jobs_lease_watch_update on public.tool_jobs;
create trigger tool_jobs_lease_watch_update
    after update of lease_until on public.tool_jobs
    for each row
    when (new.lease_until < old.lease_until or new.lease_until <= now())
    execute function public.leasectl_lease_watch_lower();

insert into leasectl_migrations (version, name) values (29, '0029_fewer_parses')
on conflict (version) do nothing;
