-- 0021: history over years (issue 29): job_events partitioned by month, and a register of what
-- retention archived.
--
-- job_events grows by two or more rows per call and was one table with seven indexes for ever.
-- Partitioned by month on `at`, a month that is no longer wanted online leaves as a whole: written
-- out, verified, then detached and dropped (`leasectl admin retention`, console/operator/retention.py),
-- never deleted row by row (the history stays append-only: UPDATE, DELETE and TRUNCATE are refused
-- on the table and on every partition, the owner included).
--
--   job_events                 partitioned by range (at), one partition a month (UTC):
--                              job_events_YYYY_MM, plus job_events_default for a row whose month
--                              has no partition yet (never expected: the supervisor and migrate
--                              keep two months ahead; doctor warns if it holds a row, and the next
--                              leasectl_event_partitions_ensure() moves such rows into their month).
--                              The primary key is (id, at): a partition key must be part of it; id
--                              stays the identity, unique by its sequence (no login may insert an
--                              id: 0013's column privileges).
--   job_events_archive         one row per month retention removed: its bounds, rows, first and
--                              last id and the sha256 of its archive file. archived_before (the
--                              end of the latest archived month) is where the online history
--                              begins: the audit says "archived" before it (console/core/history.py).
--   leasectl_event_partitions_ensure(ahead)   creates this month's and the next `ahead` months'
--                              partitions (supervisor each tick, migrate each run).
--   leasectl_archive_month(...)               the last step of retention: under the table's lock it
--                              checks the month still holds exactly what was archived (rows, first
--                              and last id), that the metric rollup counted it (0008), then detaches
--                              and drops the partition, registers the month and journals the action
--                              (fleet_events history_archived) in one transaction.
--
-- The conversion copies every row, in id order, with its id, into the new table, inside this
-- migration's transaction: writers wait for it (the README gives the time measured for 1,000,000
-- events). Everything that named the old table is carried over as it was: the indexes (their
-- predicates word for word: the planner matches them), the triggers, the check constraints (NOT
-- VALID ones stay NOT VALID: history is kept as it was written), the grants (column privileges
-- included), the comments, and the functions whose signature names its row type.
--
-- Runnable with `psql -v ON_ERROR_STOP=1 -f` and by `leasectl migrate`. Every function follows
-- 0012's rule (search_path = pg_catalog, public, pg_temp; every name schema-qualified).

-- ---------------------------------------------------------------------------------------
-- One month's partition: job_events_YYYY_MM over [first day, first day of the next) in UTC.
-- Created empty, or, when rows of that month wait in the default partition (a month that had no
-- partition in time), filled with them: the default partition is detached (its rows then leave
-- it without passing the append-only trigger, which a detached partition no longer carries), the
-- month's rows are copied into a table of their own, removed from the default, and both are
-- attached again. Returns whether it created the partition. The owner's (security definer): the
-- supervisor may call leasectl_event_partitions_ensure(), nothing else.
create function public.leasectl_event_partition_create(p_month date) returns boolean
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    v_month date := date_trunc('month', p_month)::date;
    v_name  text := 'job_events_' || to_char(v_month, 'YYYY_MM');
    v_from  timestamptz := v_month::timestamp at time zone 'UTC';
    v_to    timestamptz := (v_month + interval '1 month')::timestamp at time zone 'UTC';
    v_cols  text := 'id, job_id, at, kind, actor, fencing_token, state_from, state_to, owner_from, owner_to, '
                    'lease_until, reason, request_id, details, db_role';
begin
    if to_regclass('public.' || v_name) is not null then
        return false;
    end if;
    if not exists (select 1 from public.job_events_default d where d.at >= v_from and d.at < v_to) then
        execute format('create table public.%I partition of public.job_events for values from (%L) to (%L)',
                       v_name, v_from, v_to);
    else
        alter table public.job_events detach partition public.job_events_default;
        execute format('create table public.%I (like public.job_events including defaults including constraints)',
                       v_name);
        execute format('alter table public.%I alter column id drop identity if exists', v_name);
        execute format('insert into public.%I (%s) select %s from public.job_events_default '
                       'where at >= %L and at < %L order by id', v_name, v_cols, v_cols, v_from, v_to);
        delete from public.job_events_default where at >= v_from and at < v_to;
        execute format('alter table public.job_events attach partition public.%I for values from (%L) to (%L)',
                       v_name, v_from, v_to);
        alter table public.job_events attach partition public.job_events_default default;
    end if;
    -- TRUNCATE of a partition is no TRUNCATE of the table: its statement trigger is the partition's own
    execute format('create trigger job_events_no_truncate before truncate on public.%I '
                   'for each statement execute function public.leasectl_job_events_append_only()', v_name);
    -- the operator journal (audit/operator_actions.sql) asks for one operator's newest actions: an
    -- operator's name is rare among the actors (workers write most rows) and only on operator kinds,
    -- which the planner, taking actor and kind as independent, estimated 85 times too few per month:
    -- it read and sorted every one of them instead of walking the index to the newest (the history
    -- benchmark: p95 61 ms -> 2 ms). Their joint frequencies, per partition (statistics on the
    -- partitioned table are not used for its partitions' scans); 250: the operator names' entries
    -- among the workers' (ANALYZE of a month of 700,000 events: 0.3 s -> 0.9 s).
    execute format('create statistics public.%I (mcv) on actor, kind from public.%I', v_name || '_actor_kind', v_name);
    execute format('alter statistics public.%I set statistics 250', v_name || '_actor_kind');
    execute format('revoke all on public.%I from public', v_name);
    return true;
end $$;

comment on function public.leasectl_event_partition_create(date) is
    'Creates job_events'' partition for the month of p_month (UTC), taking its rows from the default partition.';

-- This month's partition and the next p_ahead months', each created if missing. A partition is
-- created under a short lock timeout (creating one locks the table against writers for an
-- instant; better to try again at the next tick than to queue writers behind a long reader).
create function public.leasectl_event_partitions_ensure(p_ahead integer default 2) returns integer
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    v_this    date := date_trunc('month', now() at time zone 'UTC')::date;
    v_created integer := 0;
    v_month   date;
begin
    if p_ahead is null or p_ahead < 0 or p_ahead > 24 then
        raise exception 'months ahead must be between 0 and 24, not %', p_ahead using errcode = '22023';
    end if;
    for v_month in select (v_this + make_interval(months => n))::date from generate_series(0, p_ahead) n loop
        if to_regclass('public.job_events_' || to_char(v_month, 'YYYY_MM')) is null then
            perform set_config('lock_timeout', '1000', true);
            if public.leasectl_event_partition_create(v_month) then
                v_created := v_created + 1;
            end if;
        end if;
    end loop;
    return v_created;
end $$;

comment on function public.leasectl_event_partitions_ensure(integer) is
    'Creates job_events'' partitions for this month and the next p_ahead months (UTC); returns how many it created.';

-- ---------------------------------------------------------------------------------------
-- The conversion, as one statement: with `psql -f` (each statement its own transaction) as with
-- `leasectl migrate`, it happens whole or not at all, under the table's lock from the first read
-- to the last row.
do $conversion$
declare
    r       record;
    v_month date;
begin
    lock table public.job_events in access exclusive mode;

    -- what names the old table, read before it is renamed (pg_get_*def would print the new name)
    create temporary table leasectl_0021_carried (kind text, name text, definition text);
    insert into leasectl_0021_carried (kind, name, definition)
    select 'index', i.indexrelid::regclass::text, pg_catalog.pg_get_indexdef(i.indexrelid)
    from pg_catalog.pg_index i
    where i.indrelid = 'public.job_events'::regclass and not i.indisprimary
    union all
    select 'trigger', t.tgname, pg_catalog.pg_get_triggerdef(t.oid)
    from pg_catalog.pg_trigger t
    where t.tgrelid = 'public.job_events'::regclass and not t.tgisinternal
    union all
    select 'check', c.conname,
           format('alter table public.job_events add constraint %I %s', c.conname,
                  pg_catalog.pg_get_constraintdef(c.oid))
    from pg_catalog.pg_constraint c
    where c.conrelid = 'public.job_events'::regclass and c.contype = 'c'
    union all
    select 'function', p.oid::regprocedure::text, pg_catalog.pg_get_functiondef(p.oid)
    from pg_catalog.pg_proc p
    where p.prorettype = 'public.job_events'::regtype or 'public.job_events'::regtype = any (p.proargtypes)
    union all
    -- the function's grants (its owner is the schema's: leasectl_give_to_owner below)
    select 'function_grant', p.oid::regprocedure::text, a.grantee::regrole::text
    from pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
    where (p.prorettype = 'public.job_events'::regtype or 'public.job_events'::regtype = any (p.proargtypes))
      and a.grantee <> 0 and a.grantee <> p.proowner and a.privilege_type = 'EXECUTE'
    union all
    select 'grant', a.privilege_type, a.grantee::regrole::text
    from pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
    where c.oid = 'public.job_events'::regclass and a.grantee <> 0 and a.grantee <> c.relowner
    union all
    select 'column_grant', a.privilege_type || ' (' || pg_catalog.quote_ident(att.attname) || ')',
           a.grantee::regrole::text
    from pg_catalog.pg_attribute att, pg_catalog.aclexplode(att.attacl) a
    where att.attrelid = 'public.job_events'::regclass and att.attnum > 0 and not att.attisdropped
      and a.grantee <> 0
    union all
    select 'comment', null, pg_catalog.obj_description('public.job_events'::regclass, 'pg_class')
    union all
    select 'column_comment', att.attname, pg_catalog.col_description(att.attrelid, att.attnum)
    from pg_catalog.pg_attribute att
    where att.attrelid = 'public.job_events'::regclass and att.attnum > 0 and not att.attisdropped
      and pg_catalog.col_description(att.attrelid, att.attnum) is not null;

    -- the old table steps aside: its indexes go (their names are the new table's), its key and
    -- sequence are renamed
    for r in select c.name from leasectl_0021_carried c where c.kind = 'index' loop
        execute format('drop index %s', r.name);
    end loop;
    alter table public.job_events rename constraint job_events_pkey to job_events_unpartitioned_pkey;
    alter table public.job_events rename to job_events_unpartitioned;
    alter sequence public.job_events_id_seq rename to job_events_unpartitioned_id_seq;

    create table public.job_events (
        id             bigint generated always as identity,
        job_id         uuid not null,           -- no FK: history outlives any cleanup of tool_jobs
        at             timestamptz not null default now(),
        kind           text not null,
        actor          text,
        fencing_token  bigint,
        state_from     text,
        state_to       text,
        owner_from     text,
        owner_to       text,
        lease_until    timestamptz,
        reason         text,
        request_id     uuid,
        details        jsonb not null default '{}'::jsonb,
        db_role        text default session_user,
        constraint job_events_pkey primary key (id, at)
    ) partition by range (at);
    revoke all on public.job_events from public;
    create table public.job_events_default partition of public.job_events default;
    create trigger job_events_no_truncate before truncate on public.job_events_default
        for each statement execute function public.leasectl_job_events_append_only();
    revoke all on public.job_events_default from public;

    -- the rows, in id order, with their ids, into the months they belong to
    for v_month in
        select distinct date_trunc('month', e.at at time zone 'UTC')::date
        from public.job_events_unpartitioned e
        where isfinite(e.at)
        union
        select (date_trunc('month', now() at time zone 'UTC') + make_interval(months => n))::date
        from generate_series(0, 2) n
    loop
        perform public.leasectl_event_partition_create(v_month);
    end loop;
    insert into public.job_events (id, job_id, at, kind, actor, fencing_token, state_from, state_to, owner_from,
                                   owner_to, lease_until, reason, request_id, details, db_role)
    overriding system value
    select u.id, u.job_id, u.at, u.kind, u.actor, u.fencing_token, u.state_from, u.state_to, u.owner_from,
           u.owner_to, u.lease_until, u.reason, u.request_id, u.details, u.db_role
    from public.job_events_unpartitioned u
    order by u.id;

    -- the identity goes on from where the old one stood (ids a rolled-back transaction took included)
    perform pg_catalog.setval(pg_catalog.pg_get_serial_sequence('public.job_events', 'id'),
                              greatest(s.last_value,
                                       coalesce((select max(u.id) from public.job_events_unpartitioned u), 1)),
                              s.is_called or exists (select 1 from public.job_events_unpartitioned))
    from public.job_events_unpartitioned_id_seq s;

    -- what named the old table, on the new one
    for r in select * from leasectl_0021_carried c where c.kind = 'check' loop
        execute r.definition;
    end loop;
    for r in select * from leasectl_0021_carried c where c.kind = 'index' loop
        execute r.definition;
    end loop;
    for r in select * from leasectl_0021_carried c where c.kind = 'trigger' loop
        execute r.definition;
    end loop;
    for r in select * from leasectl_0021_carried c where c.kind in ('grant', 'column_grant') loop
        execute format('grant %s on public.job_events to %s', r.name, r.definition);
    end loop;
    for r in select * from leasectl_0021_carried c where c.kind = 'comment' and c.definition is not null loop
        execute format('comment on table public.job_events is %L', r.definition);
    end loop;
    for r in select * from leasectl_0021_carried c where c.kind = 'column_comment' loop
        execute format('comment on column public.job_events.%I is %L', r.name, r.definition);
    end loop;
    -- a function whose signature names the row type depends on the old table: dropped, and
    -- created again from its own text (which names job_events, now the new table)
    for r in select * from leasectl_0021_carried c where c.kind = 'function' loop
        execute format('drop function %s', r.name);
    end loop;
    for r in select * from leasectl_0021_carried c where c.kind = 'function' loop
        execute r.definition;
        execute format('revoke all on function %s from public', r.name);
        perform public.leasectl_give_to_owner(r.name::regprocedure);
    end loop;
    for r in select * from leasectl_0021_carried c where c.kind = 'function_grant' loop
        execute format('grant execute on function %s to %s', r.name, r.definition);
    end loop;

    drop table public.job_events_unpartitioned;
    drop table leasectl_0021_carried;
end $conversion$;

comment on table public.job_events_default is
    'Rows whose month had no partition in time (expected empty; leasectl_event_partitions_ensure() moves them out).';

-- ---------------------------------------------------------------------------------------
-- What retention archived, a row per month.
create table public.job_events_archive (
    month        date primary key check (month = date_trunc('month', month)::date),
    range_from   timestamptz not null,
    range_to     timestamptz not null check (range_to > range_from),
    rows         bigint not null check (rows >= 0),
    first_id     bigint,
    last_id      bigint,
    sha256       text not null check (sha256 ~ '^[0-9a-f]{64}$'),
    file         text not null check (length(file) <= 200),
    archived_at  timestamptz not null default now(),
    archived_by  text not null check (length(archived_by) between 1 and 200),
    db_role      text not null default session_user
);
comment on table public.job_events_archive is
    'Months of job_events that retention wrote to an archive, verified, and dropped: the history before '
    'max(range_to) is in those files, not in the table.';
revoke all on public.job_events_archive from public;

create function public.leasectl_archive_register_only() returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    raise exception 'job_events_archive is append-only: % is refused', tg_op using errcode = 'LCH01';
end $$;
create trigger job_events_archive_no_update_delete before update or delete on public.job_events_archive
    for each row execute function public.leasectl_archive_register_only();
create trigger job_events_archive_no_truncate before truncate on public.job_events_archive
    for each statement execute function public.leasectl_archive_register_only();

-- Where the online history begins: the end of the latest archived month (null: nothing archived).
create function public.leasectl_archived_before() returns timestamptz
language sql stable security definer set search_path = pg_catalog, public, pg_temp as $$
    select max(a.range_to) from public.job_events_archive a
$$;

-- The last step of retention, in one transaction: the month's partition still holds exactly what
-- the archive holds (rows, first and last id, counted under a lock), the metric rollup
-- has counted all of it (0008: counters survive the drop), then it is detached and dropped, the
-- month registered and the action journaled. Zero rows never: it raises instead (LCR01 the month
-- is not what was archived, LCR02 the rollup has not reached it yet, LCR03 no such partition or
-- not a whole month in the past).
create function public.leasectl_archive_month(p_month date, p_rows bigint, p_first_id bigint, p_last_id bigint,
                                              p_sha256 text, p_file text, p_actor text, p_reason text)
returns table (archived_month date, archived_rows bigint, archived_before timestamptz)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    v_name   text := 'job_events_' || to_char(p_month, 'YYYY_MM');
    v_from   timestamptz := p_month::timestamp at time zone 'UTC';
    v_to     timestamptz := (p_month + interval '1 month')::timestamp at time zone 'UTC';
    v_rows   bigint;
    v_first  bigint;
    v_last   bigint;
    v_folded bigint;
begin
    if p_month is null or p_month <> date_trunc('month', p_month)::date then
        raise exception 'a month is its first day, not %', p_month using errcode = '22023';
    end if;
    if p_actor is null or length(p_actor) not between 1 and 200 then
        raise exception 'retention is journaled under an operator''s name (1 to 200 characters)'
            using errcode = '22023';
    end if;
    if v_to > now() then
        raise exception 'the month % has not ended', to_char(p_month, 'YYYY-MM') using errcode = 'LCR03';
    end if;
    if to_regclass('public.' || v_name) is null or not exists (
            select 1 from pg_catalog.pg_inherits i
            where i.inhrelid = to_regclass('public.' || v_name) and i.inhparent = 'public.job_events'::regclass) then
        raise exception 'job_events has no partition for %', to_char(p_month, 'YYYY-MM') using errcode = 'LCR03';
    end if;
    -- a month that has ended takes no new row (the journal dates every row now()); SHARE keeps it so
    -- while it is counted, and lets readers of the history be: the table itself is locked only by
    -- the detach, for an instant (the caller's lock_timeout bounds the wait)
    execute format('lock table public.%I in share mode', v_name);
    execute format('select count(*), min(id), max(id) from public.%I', v_name) into v_rows, v_first, v_last;
    if v_rows <> p_rows or v_first is distinct from p_first_id or v_last is distinct from p_last_id then
        raise exception 'job_events for % holds % rows (ids % to %), the archive % (ids % to %)',
            to_char(p_month, 'YYYY-MM'), v_rows, v_first, v_last, p_rows, p_first_id, p_last_id
            using errcode = 'LCR01';
    end if;
    select f.folded_through into v_folded from public.leasectl_metric_folds f;
    if v_last is not null and coalesce(v_folded, 0) < v_last then
        raise exception 'the metric rollup has counted events up to id %, not yet the month''s last (%)',
            coalesce(v_folded, 0), v_last using errcode = 'LCR02',
            hint = 'leasectl_metrics_fold() counts them (leasectl metrics serve runs it every 30 s)';
    end if;
    execute format('alter table public.job_events detach partition public.%I', v_name);
    execute format('drop table public.%I', v_name);
    insert into public.job_events_archive (month, range_from, range_to, rows, first_id, last_id, sha256, file,
                                           archived_by)
    values (p_month, v_from, v_to, v_rows, v_first, v_last, p_sha256, p_file, p_actor);
    insert into public.fleet_events (kind, actor, reason, details)
    values ('history_archived', p_actor, p_reason,
            jsonb_build_object('month', to_char(p_month, 'YYYY-MM'), 'rows', v_rows, 'first_id', v_first,
                               'last_id', v_last, 'sha256', p_sha256, 'file', p_file));
    return query select p_month, v_rows, public.leasectl_archived_before();
end $$;

comment on function public.leasectl_archive_month(date, bigint, bigint, bigint, text, text, text, text) is
    'Retention''s last step: checks the month holds what was archived and was counted, then drops it, '
    'registers it and journals it (fleet_events history_archived).';

-- the operator journal's fleet rows gain retention (audit/operator_actions.sql; 0018's indexes, for
-- the new kind: a predicate the query's does not imply is an index the planner cannot use)
drop index public.fleet_events_operator_idx;
drop index public.fleet_events_operator_at_idx;
create index fleet_events_operator_idx on public.fleet_events (actor, at)
    where kind in ('shutdown_requested', 'shutdown_refused', 'tool_paused', 'tool_resumed', 'operator_revoke',
                   'shutdown_accepted', 'shutdown_declined', 'history_archived');
create index fleet_events_operator_at_idx on public.fleet_events (at)
    where kind in ('shutdown_requested', 'shutdown_refused', 'tool_paused', 'tool_resumed', 'operator_revoke',
                   'shutdown_accepted', 'shutdown_declined', 'history_archived');

revoke all on function public.leasectl_event_partition_create(date) from public;
revoke all on function public.leasectl_event_partitions_ensure(integer) from public;
revoke all on function public.leasectl_archive_month(date, bigint, bigint, bigint, text, text, text, text) from public;
revoke all on function public.leasectl_archive_register_only() from public;
do $$
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_supervisor') then
        grant execute on function public.leasectl_event_partitions_ensure(integer) to leasectl_supervisor;
        grant select on public.job_events_archive to leasectl_worker, leasectl_operator, leasectl_auditor,
                                                    leasectl_supervisor;
    end if;
end $$;
select public.leasectl_give_to_owner('public.leasectl_event_partition_create(date)');
select public.leasectl_give_to_owner('public.leasectl_event_partitions_ensure(integer)');
select public.leasectl_give_to_owner('public.leasectl_archive_month(date, bigint, bigint, bigint, text, text, text, text)');
select public.leasectl_give_to_owner('public.leasectl_archived_before()');

insert into leasectl_migrations (version, name) values (21, '0021_job_events_partitioned')
on conflict (version) do nothing;
