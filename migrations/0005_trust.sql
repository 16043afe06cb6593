-- 0005: who may write what, enforced by the database for any SQL a login sends (issue 12).
--
-- Until now the roles of 0002 said *which columns* a group may touch, not *which calls*: a
-- leasectl_worker login could finish another worker's call under a live lease, expire a lease to
-- steal it, settle an outcome_unknown payment as succeeded, and write events in anybody's name;
-- an operator login could approve a retry with a direct UPDATE that journaled nothing. This file
-- binds each write to the login that sends it:
--
--   * row level security on tool_jobs: a worker login owns calls only as `<login>` or
--     `<login>:<name>` and writes only calls it owns (plus claiming queued calls and reclaiming
--     expired ones); the supervisor writes only live calls and never grants ownership;
--   * operators act only through SECURITY DEFINER functions (queries/operator/ call them) that
--     take the guard, make the change and write the journal row in one statement; they lose their
--     direct UPDATE on tool_jobs and INSERT on job_events;
--   * triggers that no client can skip: leaving outcome_unknown needs the operator's journal
--     row, an unverifiable call whose side effect started never goes back to the queue, a queued
--     call is changed only by what takes it out of the queue, and worker events are accepted only
--     from the login that held the call under that token;
--   * every job_events and fleet_events row records `db_role` (session_user): the database role
--     that caused it, beside the `actor` the client named.
--
-- Why RLS and not more triggers: the identity test is a plain comparison added to the quals of
-- the statement (owner_id = session_user ...), so the hot path -- heartbeats, which must stay
-- HOT and trigger-free -- pays no plpgsql, and a guarded UPDATE that does not own the row
-- simply matches nothing (zero rows: "not yours"), the answer the protocol already gives. RLS is
-- bypassed by superusers, BYPASSRLS roles and the table owner: they are outside this model (they
-- can drop any rule), and the demo, tests and benchmark that run as them keep working unchanged.
--
-- What binds whom:
--   RLS                             non-superuser, non-owner sessions (the group roles' logins)
--   LCS07 (requeue), LCS08          everyone (LCS08 only matters where RLS applies)
--   LCS09, LCS10, LCH03             every role but a superuser and the schema owner -- a migrator
--                                   that is neither (a plain owner role) is bound like anyone;
--                                   a superuser can disable triggers anyway, so binding it buys
--                                   nothing but broken fixtures
--   LCH02                           everyone but the schema owner (as in 0001)
--
-- New SQLSTATEs (class LC, as in 0001 and 0004):
--   LCS07 (extended) an unverifiable call whose side effect started sent back to the queue
--   LCS08 a leasectl_worker login named an owner id that is not its own
--   LCS09 outcome_unknown left without the operator journal row that approves or settles it
--   LCS10 a queued call changed in place (only a claim, a cancel or a deadline moves it)
--   LCH03 a worker event in someone else's name, or for a call the writer never held under
--         that fencing token
--
-- Runnable with `psql -v ON_ERROR_STOP=1 -f` and by `leasectl migrate`. Every statement that
-- names a group role is in a DO block that checks pg_roles first: where the roles were skipped
-- (no CREATEROLE at 0002) nothing was granted to them either, and the owner keeps working.

-- ---------------------------------------------------------------------------------------
-- The schema owner, baked in at migration time: "is this the database's own trigger or
-- function?" becomes a comparison with a constant instead of a pg_class lookup per event
-- (about 22 us each in profiles). If the tables change owner later, the guards fall back to
-- looking the owner up, so nothing breaks; they are only slower until the next migration.
do $$
declare
    v_owner name := (select pg_get_userbyid(relowner) from pg_class where oid = 'public.job_events'::regclass);
begin
    execute format($f$
        create function leasectl_schema_owner() returns name
        language sql immutable parallel safe as %L
    $f$, format('select %L::name', v_owner));
end $$;

comment on function leasectl_schema_owner() is
    'The owner of the leasectl tables when 0005 ran: the role the schema''s own triggers and functions run as.';

-- A worker's owner id is bound to its login: `login` itself, or `login:<name>` when several
-- workers share one login (the database then cannot tell them apart; doctor says so). One
-- definition for the policies, the guard trigger and queries/worker/check_identity.sql. Plain
-- SQL with no SET clause, so the planner inlines it into the RLS quals: no function call per row.
create function leasectl_worker_id_bound(p_id text) returns boolean
language sql stable parallel safe as $$
    select p_id = session_user::text or starts_with(p_id, session_user::text || ':')
$$;

-- Does this session's identity bind what it may own? Exactly when RLS applies to it on tool_jobs
-- (not a superuser, BYPASSRLS or the owner) and it has the privileges of leasectl_worker. A
-- missing group role means no binding (and no grants either).
create function leasectl_binds_worker_identity() returns boolean
language sql stable as $$
    select coalesce(row_security_active('public.tool_jobs'::regclass)
                    and pg_has_role(current_user, to_regrole('leasectl_worker'), 'USAGE'), false)
$$;

-- The login behind the session is a worker (used by the journal trigger, which runs as the
-- owner and so can only ask about session_user). is_superuser reflects the session's role, not
-- the SECURITY DEFINER context, and a client cannot set it.
create function leasectl_is_worker_login() returns boolean
language sql stable as $$
    select current_setting('is_superuser') = 'off'
           and coalesce(pg_has_role(session_user, to_regrole('leasectl_worker'), 'USAGE'), false)
$$;

-- Is the current role exempt from the journal rules (LCS09, LCS10, LCH03)? The schema owner and
-- superusers are: both can disable any trigger. is_superuser is the session's current role
-- (SET ROLE included), which is what current_user is outside SECURITY DEFINER code; the owner
-- is matched by name first and by the catalog only if the tables changed owner since 0005.
-- plpgsql rather than SQL: its plans are cached per session, and it is only asked on rare
-- paths (a worker event, a queued or outcome_unknown call changing), never per heartbeat.
create function leasectl_is_exempt() returns boolean
language plpgsql stable set search_path = pg_catalog, public as $$
begin
    return current_user = public.leasectl_schema_owner()
        or current_setting('is_superuser') = 'on'
        or exists (select 1 from pg_class c join pg_roles r on r.oid = c.relowner
                   where c.oid = 'public.job_events'::regclass and r.rolname = current_user);
end $$;

-- ---------------------------------------------------------------------------------------
-- db_role: the database role that caused each event. Existing rows stay null: their role was
-- never recorded, and history is append-only (no backfill that would guess). The default makes
-- rows written by the schema's own triggers correct without any trigger work; the kind guard
-- overwrites whatever a client sends.
alter table job_events add column db_role text;
alter table job_events alter column db_role set default session_user;
alter table fleet_events add column db_role text;
alter table fleet_events alter column db_role set default session_user;

comment on column job_events.db_role is
    'session_user of the session that caused the event (set by the database; null before 0005)';
comment on column fleet_events.db_role is
    'session_user of the session that caused the event (set by the database; null before 0005)';

-- ---------------------------------------------------------------------------------------
-- The kind guard. Its WHEN clause (below) skips the rows the schema's own triggers write --
-- claims, completions, state changes: the bulk of all events -- so they pay no plpgsql at all:
-- they run as the owner and use the defaults for `at` and `db_role`. Everything else (worker
-- events, anything a client sends) comes here.
create or replace function leasectl_job_events_kind_guard() returns trigger
language plpgsql set search_path = pg_catalog, public as $$
begin
    new.at := now();
    new.db_role := session_user;
    if current_user = public.leasectl_schema_owner() then
        return new;
    end if;
    -- Ownership and state kinds are the tool_jobs triggers' alone, and so is side_effect_started
    -- (the trigger's name for the start of a request before 0005). tool_request_started, the
    -- seed's name the trigger uses now, stays a worker kind as well: a worker reports the start
    -- of a request that marks no side effect (a read-only tool) with it, under the rule below.
    if new.kind in ('enqueued', 'claimed', 'reclaimed', 'state_changed', 'fenced',
                    'side_effect_started') then
        if current_user = (select pg_get_userbyid(relowner) from pg_class where oid = tg_relid) then
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
    if new.kind like 'operator\_%' then
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
    if num_nonnulls(new.state_from, new.state_to, new.owner_from, new.owner_to, new.request_id) > 0 then
        raise exception 'event % is a report: state_from, state_to, owner_from, owner_to and request_id are the database''s and the operators''',
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

-- The owner's name is written into the WHEN clause as a literal: a WHEN clause is not planned,
-- so a function call there (even an immutable SQL one) would run its SQL body on every event.
drop trigger job_events_kind_guard on job_events;
do $$
begin
    execute format($f$
        create trigger job_events_kind_guard
            before insert on job_events
            for each row
            when (current_user <> %L::name
                  or new.at is distinct from now()
                  or new.db_role is distinct from session_user)
            execute function leasectl_job_events_kind_guard()
    $f$, leasectl_schema_owner());
end $$;

-- fleet_events: the same stamp. Rows written with the default (the fleet journal trigger, the
-- operator's refusal rows) skip the function; a client that names a db_role gets it replaced.
create function leasectl_fleet_events_stamp() returns trigger
language plpgsql set search_path = pg_catalog, public as $$
begin
    new.db_role := session_user;
    return new;
end $$;

create trigger fleet_events_stamp
    before insert on fleet_events
    for each row when (new.db_role is distinct from session_user)
    execute function leasectl_fleet_events_stamp();

-- ---------------------------------------------------------------------------------------
-- The state machine of 0001, with what 0005 adds marked NEW. Still fired only by the WHEN
-- clause of tool_jobs_guard_update (re-created below): heartbeats never get here.
create or replace function leasectl_tool_jobs_guard() returns trigger
language plpgsql set search_path = pg_catalog, public as $$
declare
    v_side_effect text;
begin
    if tg_op = 'INSERT' then
        if new.state <> 'queued' then
            raise exception 'a new call must start queued, not %', new.state using errcode = 'LCS01';
        end if;
        if new.owner_id is not null or new.fencing_token <> 0 or new.attempt <> 0 then
            raise exception 'a new call has no owner, token 0 and no attempts' using errcode = 'LCS01';
        end if;
        new.payload_hash := encode(sha256(convert_to(new.payload::text, 'UTF8')), 'hex');
        return new;
    end if;

    -- an upsert that found an existing key touches the row without changing it
    if new is not distinct from old then
        return new;
    end if;

    -- NEW: a queued call belongs to nobody, so RLS has to let every worker claim it; what must not
    -- happen is a worker rewriting it in place (attempt = 999 so it never runs, a forged
    -- side_effect_started_at or result). Only a claim, a cancel or its deadline moves it.
    -- (nested ifs, here and below: a condition that calls a non-inlinable function or has a
    -- subquery runs through the executor, microseconds, even when its first term is false)
    if old.state = 'queued' and new.state = 'queued' then
        if not public.leasectl_is_exempt() then
            raise exception 'call % is queued: only a claim, a cancel or its deadline may change it', old.id
                using errcode = 'LCS10';
        end if;
    end if;

    if old.state in ('succeeded', 'failed', 'cancelled') then
        raise exception 'call % is % (terminal) and cannot change', old.id, old.state
            using errcode = 'LCS03';
    end if;

    if new.id <> old.id or new.idempotency_key <> old.idempotency_key or new.tool <> old.tool
       or new.payload is distinct from old.payload or new.created_at <> old.created_at then
        raise exception 'id, idempotency_key, tool, payload and created_at of a call never change'
            using errcode = 'LCS05';
    end if;

    if new.fencing_token < old.fencing_token then
        raise exception 'fencing token of call % cannot go down (% -> %)',
            old.id, old.fencing_token, new.fencing_token using errcode = 'LCS02';
    end if;

    if new.state <> old.state and not (
           (old.state = 'queued'           and new.state in ('running', 'cancelled', 'failed'))
        or (old.state = 'running'          and new.state in ('succeeded', 'failed', 'queued',
                                                             'outcome_unknown', 'cancel_requested',
                                                             'cancelled'))
        or (old.state = 'cancel_requested' and new.state in ('cancelled', 'succeeded', 'failed',
                                                             'outcome_unknown'))
        or (old.state = 'outcome_unknown'  and new.state in ('queued', 'succeeded', 'failed'))
    ) then
        raise exception 'illegal transition % -> % for call %', old.state, new.state, old.id
            using errcode = 'LCS01';
    end if;

    -- NEW: a worker login takes ownership only under its own identity. RLS would refuse it too
    -- (WITH CHECK), but this trigger runs first and can say which id and which login; the first
    -- two tests are string comparisons, so an honest claim never reaches the role lookup.
    if new.owner_id is distinct from old.owner_id and new.owner_id is not null
       and not public.leasectl_worker_id_bound(new.owner_id)
       and public.leasectl_binds_worker_identity() then
        raise exception 'worker id % is not yours: a leasectl_worker login % may own calls only as % or %:<name>',
            new.owner_id, session_user, session_user, session_user
            using errcode = 'LCS08',
                  hint = 'start the worker with worker_id ' || session_user || ' or ' || session_user
                         || ':<name> (queries/worker/check_identity.sql checks it)';
    end if;

    -- Every grant of ownership is a new token, and only once the previous lease is over.
    if new.state = 'running' and (old.state <> 'running'
                                  or new.owner_id is distinct from old.owner_id
                                  or new.fencing_token <> old.fencing_token) then
        if new.owner_id is null then
            raise exception 'a running call needs an owner' using errcode = 'LCS01';
        end if;
        if new.fencing_token <= old.fencing_token then
            raise exception 'granting call % to % needs a new fencing token', old.id, new.owner_id
                using errcode = 'LCS02';
        end if;
        if old.state in ('running', 'cancel_requested') and old.lease_until >= now() then
            raise exception 'call % is leased to % until %', old.id, old.owner_id, old.lease_until
                using errcode = 'LCS06';
        end if;
        if old.state = 'running' and old.side_effect_started_at is not null then
            select side_effect into v_side_effect from tools where name = old.tool;
            if v_side_effect = 'mutating_unverifiable' then
                raise exception 'call % started an unverifiable side effect; only a human may retry it',
                    old.id using errcode = 'LCS07';
            end if;
        end if;
    elsif new.owner_id is distinct from old.owner_id and new.owner_id is not null then
        raise exception 'ownership of call % can only be granted by a claim', old.id
            using errcode = 'LCS01';
    end if;

    -- NEW: the same rule on the other road back to a worker. Requeueing an unverifiable call
    -- whose request may have run means the next claim runs it again (a second payment) with no
    -- human asked: worker/fail.sql and the sweep send it to outcome_unknown instead.
    if new.state = 'queued' and old.state in ('running', 'cancel_requested')
       and old.side_effect_started_at is not null then
        select side_effect into v_side_effect from tools where name = old.tool;
        if v_side_effect = 'mutating_unverifiable' then
            raise exception 'call % started an unverifiable side effect; it waits in outcome_unknown for a human, never back in the queue',
                old.id using errcode = 'LCS07';
        end if;
    end if;

    if old.state = 'outcome_unknown' and new.state = 'queued' then
        if new.retry_approved_by is null or new.retry_approved_at is null then
            raise exception 'call % has an unknown outcome: a retry needs a human approval', old.id
                using errcode = 'LCS04';
        end if;
        if new.retry_approved_by = old.owner_id or new.retry_approved_by = old.agent_id then
            raise exception 'the executor of call % cannot approve its own retry', old.id
                using errcode = 'LCS04';
        end if;
    end if;

    -- NEW: outcome_unknown is left only by a human decision that is on the record. The operator
    -- functions write their journal row (outcome applied) *before* the update, in the same
    -- transaction, so the row is there when this runs; a direct UPDATE has none. The row is
    -- matched on the call's fencing token: a call is in outcome_unknown at most once per token
    -- (leaving it goes to a terminal state, or to queued, from where only a claim -- a new
    -- token -- leads back), so an old approval can never be replayed.
    if old.state = 'outcome_unknown' and new.state <> 'outcome_unknown' then
        if not exists (select 1 from job_events e
                       where e.job_id = old.id
                         and e.kind = case when new.state = 'queued' then 'operator_approve_retry'
                                           else 'operator_mark_terminal' end
                         and e.fencing_token = new.fencing_token
                         and e.state_from = 'outcome_unknown'
                         and e.state_to = new.state
                         and e.details ->> 'outcome' = 'applied'
                         and (new.state <> 'queued' or e.actor = new.retry_approved_by))
           and not public.leasectl_is_exempt() then
            raise exception 'call % has an unknown outcome: only operator/approve_retry.sql or operator/mark_terminal.sql, run by an operator, may decide it',
                old.id using errcode = 'LCS09';
        end if;
    end if;

    if old.state = 'cancel_requested' and new.state = 'succeeded' then
        new.completed_despite_cancel := true;
    end if;
    if new.state in ('succeeded', 'failed', 'cancelled') then
        new.finished_at := coalesce(new.finished_at, now());
    end if;
    return new;
end $$;

-- The guard now also fires on an update that leaves a queued call queued (the NEW rule LCS10
-- above): nothing in the protocol does that, so no legitimate path pays for it (the repeated
-- key of enqueue's no-op upsert returns at once), and heartbeats (running calls) still never
-- reach plpgsql. One trigger rather than a second one: every BEFORE ROW trigger costs each
-- UPDATE statement -- heartbeats included -- the parse of its WHEN clause, about 8 us.
drop trigger tool_jobs_guard_update on tool_jobs;
create trigger tool_jobs_guard_update
    before update on tool_jobs
    for each row
    when (old.state in ('succeeded', 'failed', 'cancelled')
          or new.state is distinct from old.state
          or new.owner_id is distinct from old.owner_id
          or new.fencing_token is distinct from old.fencing_token
          or new.idempotency_key is distinct from old.idempotency_key
          or new.tool is distinct from old.tool
          or new.id is distinct from old.id
          or new.created_at is distinct from old.created_at
          or new.retry_approved_by is distinct from old.retry_approved_by
          or old.state = 'queued')
    execute function leasectl_tool_jobs_guard();

-- ---------------------------------------------------------------------------------------
-- The journal trigger of 0001, two changes:
--   * the start of an external request is journaled as tool_request_started (the seed's name;
--     readers accept side_effect_started too, history rows never change);
--   * leasectl.actor is a transaction setting any session may set. From a worker login it is
--     not believed: the actor is its own (bound) owner id or its login, so a rogue worker
--     cannot put an operator's name on its writes. db_role records the login in any case.
create or replace function leasectl_tool_jobs_journal() returns trigger
language plpgsql security definer set search_path = pg_catalog, public as $$
declare
    v_named text := nullif(current_setting('leasectl.actor', true), '');
    v_actor text;
    v_kind  text;
begin
    if v_named is not null and public.leasectl_is_worker_login() then
        v_named := null;
    end if;

    if tg_op = 'INSERT' then
        insert into public.job_events (job_id, at, kind, actor, fencing_token, state_to, details)
        values (new.id, now(), 'enqueued', coalesce(v_named, new.agent_id, session_user),
                new.fencing_token, new.state,
                jsonb_build_object('tool', new.tool, 'idempotency_key', new.idempotency_key,
                                   'payload_hash', new.payload_hash));
        perform pg_notify('leasectl_jobs', json_build_object('id', new.id, 'state', new.state)::text);
        return null;
    end if;

    -- the new owner for claims; for a requeue (owner gone) the previous owner only if it is this
    -- login's own id, never somebody else's (that would blame them)
    v_actor := coalesce(v_named, new.owner_id,
                        case when public.leasectl_worker_id_bound(old.owner_id) then old.owner_id end,
                        session_user);

    if new.state is distinct from old.state or new.owner_id is distinct from old.owner_id
       or new.fencing_token is distinct from old.fencing_token then
        v_kind := case
            when new.state = 'running' and old.state = 'queued' then 'claimed'
            when new.state = 'running' and new.fencing_token > old.fencing_token then 'reclaimed'
            when new.state = old.state then 'fenced'
            else 'state_changed'
        end;
        insert into public.job_events (job_id, at, kind, actor, fencing_token, state_from, state_to,
                                       owner_from, owner_to, lease_until, details)
        values (new.id, now(), v_kind, v_actor, new.fencing_token, old.state, new.state,
                old.owner_id, new.owner_id, new.lease_until,
                jsonb_strip_nulls(jsonb_build_object(
                    'attempt', new.attempt,
                    'previous_token', nullif(old.fencing_token, new.fencing_token),
                    'previous_lease_until', old.lease_until,
                    'terminal_reason', new.terminal_reason,
                    'completed_despite_cancel', nullif(new.completed_despite_cancel, false))));
        perform pg_notify('leasectl_jobs',
                          json_build_object('id', new.id, 'state', new.state,
                                            'fencing_token', new.fencing_token)::text);
    end if;

    if new.side_effect_started_at is distinct from old.side_effect_started_at
       and new.side_effect_started_at is not null then
        insert into public.job_events (job_id, at, kind, actor, fencing_token, state_from, state_to,
                                       owner_from, owner_to, lease_until, details)
        values (new.id, now(), 'tool_request_started', v_actor, new.fencing_token, new.state, new.state,
                new.owner_id, new.owner_id, new.lease_until,
                jsonb_strip_nulls(jsonb_build_object('external_request_id', new.external_request_id)));
    end if;
    return null;
end $$;

-- ---------------------------------------------------------------------------------------
-- enqueue. Under RLS, INSERT ... ON CONFLICT DO UPDATE raises an error (not zero rows) when the
-- existing row fails the UPDATE policy -- which a repeated key of another worker's live call
-- does. The contract is "the same key twice returns the first call, whatever its state", so the
-- upsert runs here as the owner: exactly the statement enqueue.sql had (the no-op update still
-- returns the row a concurrent enqueue commits while we wait). It inserts only the columns a new
-- call may have; the guard trigger still makes it queued with no owner.
create function leasectl_enqueue(p_tool text, p_idempotency_key text, p_payload jsonb, p_agent_id text,
                                 p_session_id text, p_deadline_at timestamptz, p_model text,
                                 p_provider text)
returns table (id uuid, state text, fencing_token bigint, tool text, payload_hash text, created boolean)
language plpgsql security definer set search_path = pg_catalog, public as $$
#variable_conflict use_column
begin
    return query
    with agent as (
        select a.state from public.agents a where a.id = p_agent_id for share
    )
    insert into public.tool_jobs as j (tool, idempotency_key, payload, agent_id, session_id,
                                       deadline_at, model, provider)
    select p_tool, p_idempotency_key, p_payload, p_agent_id, p_session_id, p_deadline_at, p_model,
           p_provider
    where not exists (select 1 from agent where agent.state <> 'running')
    on conflict (idempotency_key) do update set idempotency_key = excluded.idempotency_key
    returning j.id, j.state, j.fencing_token, j.tool, j.payload_hash, (j.xmax = 0);
end $$;

-- ---------------------------------------------------------------------------------------
-- The operator journal: one writer for every operator row (cancel, mark terminal, approve
-- retry, and an action that failed before its guard). The request id comes from the
-- transaction setting leasectl.request_id when the caller set one (the console does, to find
-- its refusal again), and a batch id from leasectl.batch_id (bulk actions share one).
-- Not SECURITY DEFINER and not executable by PUBLIC: it is called only by the functions below,
-- which already run as the owner; an operator cannot call it to write a decision it never made.
create function leasectl_operator_journal(p_kind text, p_job_id uuid, p_actor text, p_fencing_token bigint,
                                          p_state_from text, p_state_to text, p_owner_from text,
                                          p_owner_to text, p_reason text, p_details jsonb,
                                          p_request_id uuid default null)
returns public.job_events
language plpgsql as $$
declare
    v_row   public.job_events;
    v_batch uuid := nullif(pg_catalog.current_setting('leasectl.batch_id', true), '')::uuid;
begin
    insert into public.job_events (job_id, kind, actor, fencing_token, state_from, state_to, owner_from,
                                   owner_to, reason, request_id, details)
    values (p_job_id, p_kind, p_actor, p_fencing_token, p_state_from, p_state_to, p_owner_from,
            p_owner_to, p_reason,
            coalesce(p_request_id,
                     nullif(pg_catalog.current_setting('leasectl.request_id', true), '')::uuid,
                     pg_catalog.gen_random_uuid()),
            case when v_batch is null then p_details
                 else p_details operator(pg_catalog.||) pg_catalog.jsonb_build_object('batch_id', v_batch) end)
    returning * into v_row;
    return v_row;
end $$;

-- The three guarded operator actions. Each locks the call, decides from the locked (latest)
-- row, journals the decision -- applied or refused, with the same refusal texts as before --
-- and, when applied, makes the change in the same transaction. The journal row is written
-- first so that the state machine (LCS09) can see it. leasectl.actor names the operator on the
-- state change the journal trigger writes, and is put back afterwards so that nothing later in
-- the transaction is attributed to the operator.
create function leasectl_request_cancel(p_job_id uuid, p_seen_state text, p_seen_token bigint,
                                        p_operator text, p_reason text)
returns table (job_id uuid, state text, fencing_token bigint, owner_id text, lease_until timestamptz,
               cancel_requested_at timestamptz, request_id uuid)
language plpgsql security definer set search_path = pg_catalog, public as $$
#variable_conflict use_column
declare
    t         public.tool_jobs;
    a         record;
    v_refusal text;
    v_to      text;
    v_journal public.job_events;
    v_named   text := current_setting('leasectl.actor', true);
begin
    select * into t from public.tool_jobs j where j.id = p_job_id for no key update of j;
    if not found then
        return;  -- no such call: nothing to journal
    end if;
    if t.state is distinct from p_seen_state or t.fencing_token is distinct from p_seen_token then
        v_refusal := 'the call changed since you looked';
    elsif t.state not in ('queued', 'running') then
        v_refusal := 'a ' || t.state || ' call cannot be cancelled';
    end if;
    v_to := case when v_refusal is not null then t.state
                 when t.state = 'queued' then 'cancelled' else 'cancel_requested' end;
    v_journal := public.leasectl_operator_journal(
        'operator_cancel', t.id, p_operator, t.fencing_token, t.state, v_to, t.owner_id, t.owner_id,
        p_reason,
        jsonb_build_object('outcome', case when v_refusal is null then 'applied' else 'refused' end,
                           'seen_state', p_seen_state, 'seen_token', p_seen_token,
                           'refusal', v_refusal));
    if v_refusal is not null then
        return;
    end if;
    perform set_config('leasectl.actor', p_operator, true);
    update public.tool_jobs j
    set state                   = v_to,
        cancel_requested_at     = now(),
        cancel_requested_by     = p_operator,
        cancel_requested_reason = p_reason,
        lease_until             = case when j.state = 'queued' then null else j.lease_until end,
        terminal_reason         = case when j.state = 'queued'
                                       then 'cancelled before it started by ' || p_operator
                                       else j.terminal_reason end
    where j.id = t.id
    returning j.id, j.state, j.fencing_token, j.owner_id, j.lease_until, j.cancel_requested_at into a;
    perform set_config('leasectl.actor', coalesce(v_named, ''), true);
    return query select a.id, a.state, a.fencing_token, a.owner_id, a.lease_until, a.cancel_requested_at,
                        v_journal.request_id;
end $$;

create function leasectl_mark_terminal(p_job_id uuid, p_seen_state text, p_seen_token bigint,
                                       p_terminal_state text, p_operator text, p_reason text,
                                       p_force boolean)
returns table (job_id uuid, state text, fencing_token bigint, owner_id text, fenced boolean,
               finished_at timestamptz, request_id uuid)
language plpgsql security definer set search_path = pg_catalog, public as $$
#variable_conflict use_column
declare
    t          public.tool_jobs;
    a          record;
    v_live     boolean;
    v_refusal  text;
    v_journal  public.job_events;
    v_named    text := current_setting('leasectl.actor', true);
begin
    select * into t from public.tool_jobs j where j.id = p_job_id for no key update of j;
    if not found then
        return;
    end if;
    v_live := coalesce(t.state in ('running', 'cancel_requested') and t.lease_until >= now(), false);
    -- refusals in the order the statement always gave them
    if t.state is distinct from p_seen_state or t.fencing_token is distinct from p_seen_token then
        v_refusal := 'the call changed since you looked';
    elsif v_live and not coalesce(p_force, false) then
        v_refusal := 'the owner holds a live lease; force would fence it out';
    elsif not coalesce(   (t.state = 'outcome_unknown' and p_terminal_state in ('succeeded', 'failed'))
                       or (t.state = 'queued' and p_terminal_state in ('failed', 'cancelled'))
                       or (t.state in ('running', 'cancel_requested')
                           and p_terminal_state in ('succeeded', 'failed', 'cancelled')), false) then
        v_refusal := 'a ' || t.state || ' call cannot be marked ' || coalesce(p_terminal_state, 'null');
    end if;
    v_journal := public.leasectl_operator_journal(
        'operator_mark_terminal', t.id, p_operator,
        case when v_refusal is null and v_live then t.fencing_token + 1 else t.fencing_token end,
        t.state, case when v_refusal is null then p_terminal_state else t.state end,
        t.owner_id, t.owner_id, p_reason,
        jsonb_build_object('outcome', case when v_refusal is null then 'applied' else 'refused' end,
                           'terminal_state', p_terminal_state, 'force', p_force,
                           'fenced_owner', v_refusal is null and v_live,
                           'seen_state', p_seen_state, 'seen_token', p_seen_token,
                           'refusal', v_refusal));
    if v_refusal is not null then
        return;
    end if;
    perform set_config('leasectl.actor', p_operator, true);
    update public.tool_jobs j
    set state           = p_terminal_state,
        lease_until     = null,
        fencing_token   = case when v_live then j.fencing_token + 1 else j.fencing_token end,
        terminal_reason = 'marked ' || p_terminal_state || ' by ' || p_operator || ': ' || p_reason
    where j.id = t.id
    returning j.id, j.state, j.fencing_token, j.owner_id, j.finished_at into a;
    perform set_config('leasectl.actor', coalesce(v_named, ''), true);
    return query select a.id, a.state, a.fencing_token, a.owner_id, v_live, a.finished_at,
                        v_journal.request_id;
end $$;

create function leasectl_approve_retry(p_job_id uuid, p_seen_state text, p_seen_token bigint,
                                       p_operator text, p_reason text)
returns table (job_id uuid, state text, fencing_token bigint, retry_approved_at timestamptz,
               request_id uuid)
language plpgsql security definer set search_path = pg_catalog, public as $$
#variable_conflict use_column
declare
    t          public.tool_jobs;
    a          record;
    v_refusal  text;
    v_journal  public.job_events;
    v_named    text := current_setting('leasectl.actor', true);
begin
    select * into t from public.tool_jobs j where j.id = p_job_id for no key update of j;
    if not found then
        return;
    end if;
    if t.state is distinct from p_seen_state or t.fencing_token is distinct from p_seen_token then
        v_refusal := 'the call changed since you looked';
    elsif t.state <> 'outcome_unknown' then
        v_refusal := 'only a call with an unknown outcome needs an approval (this one is ' || t.state || ')';
    elsif p_operator is not distinct from t.owner_id or p_operator is not distinct from t.agent_id then
        v_refusal := 'the executor of a call cannot approve its own retry';
    end if;
    v_journal := public.leasectl_operator_journal(
        'operator_approve_retry', t.id, p_operator, t.fencing_token, t.state,
        case when v_refusal is null then 'queued' else t.state end, t.owner_id, t.owner_id, p_reason,
        jsonb_build_object('outcome', case when v_refusal is null then 'applied' else 'refused' end,
                           'seen_state', p_seen_state, 'seen_token', p_seen_token,
                           'refusal', v_refusal));
    if v_refusal is not null then
        return;
    end if;
    perform set_config('leasectl.actor', p_operator, true);
    -- room for exactly one more attempt; the side-effect mark is cleared for the new attempt
    -- (job_events keeps the old one) and external_request_id stays, so the next owner sees which
    -- request may already have run
    update public.tool_jobs j
    set state                  = 'queued',
        retry_approved_by      = p_operator,
        retry_approved_at      = now(),
        retry_approved_reason  = p_reason,
        extra_attempts         = greatest(j.extra_attempts, j.attempt + 1 - tl.max_attempts),
        side_effect_started_at = null,
        lease_until            = null
    from public.tools tl
    where j.id = t.id
      and tl.name = j.tool
    returning j.id, j.state, j.fencing_token, j.retry_approved_at into a;
    perform set_config('leasectl.actor', coalesce(v_named, ''), true);
    return query select a.id, a.state, a.fencing_token, a.retry_approved_at, v_journal.request_id;
end $$;

-- An action that never reached its guard (lock_timeout, statement_timeout), journaled afterwards
-- in its own transaction with its cause, so that lock waits and heavy statements can be told
-- apart (seed 004). Operators no longer insert into job_events themselves, so this is their way.
create function leasectl_journal_failure(p_job_id uuid, p_action text, p_operator text, p_reason text,
                                         p_error text, p_seen_state text, p_seen_token bigint,
                                         p_request_id uuid, p_cause text)
returns table (id bigint, at timestamptz)
language plpgsql security definer set search_path = pg_catalog, public as $$
#variable_conflict use_column
declare
    t         public.tool_jobs;
    v_journal public.job_events;
begin
    if p_cause is not null and p_cause not in ('lock_timeout', 'statement_timeout') then
        raise exception 'cause must be lock_timeout or statement_timeout, not %', p_cause
            using errcode = '22023';
    end if;
    select * into t from public.tool_jobs j where j.id = p_job_id;
    if not found then
        return;
    end if;
    v_journal := public.leasectl_operator_journal(
        'operator_action_failed', t.id, p_operator, t.fencing_token, null, null, null, null, p_reason,
        jsonb_build_object('action', p_action, 'outcome', 'not_applied', 'error', p_error,
                           'seen_state', p_seen_state, 'seen_token', p_seen_token, 'cause', p_cause),
        p_request_id);
    return query select v_journal.id, v_journal.at;
end $$;

-- Functions are executable by PUBLIC by default; these are not. SECURITY DEFINER is a privilege
-- of its own: who may call each one is decided by the grants below, nothing else.
revoke all on function leasectl_enqueue(text, text, jsonb, text, text, timestamptz, text, text) from public;
revoke all on function leasectl_operator_journal(text, uuid, text, bigint, text, text, text, text, text,
                                                 jsonb, uuid) from public;
revoke all on function leasectl_request_cancel(uuid, text, bigint, text, text) from public;
revoke all on function leasectl_mark_terminal(uuid, text, bigint, text, text, text, boolean) from public;
revoke all on function leasectl_approve_retry(uuid, text, bigint, text, text) from public;
revoke all on function leasectl_journal_failure(uuid, text, text, text, text, text, bigint, uuid, text)
    from public;

-- The SECURITY DEFINER functions must run as the role the guards recognise (the table owner).
-- A superuser migrating a database owned by another role would otherwise own them itself.
do $$
declare
    f record;
begin
    for f in
        select p.oid::regprocedure as sig
        from pg_proc p
        where p.pronamespace = 'public'::regnamespace
          and p.proname in ('leasectl_enqueue', 'leasectl_operator_journal', 'leasectl_request_cancel',
                            'leasectl_mark_terminal', 'leasectl_approve_retry', 'leasectl_journal_failure')
          and p.proowner <> (select relowner from pg_class where oid = 'public.job_events'::regclass)
    loop
        begin
            execute format('alter function %s owner to %I', f.sig, public.leasectl_schema_owner());
        exception
            when insufficient_privilege then
                raise notice 'leasectl: % may not give % to %; operator actions will journal slowly',
                    current_user, f.sig, public.leasectl_schema_owner();
        end;
    end loop;
end $$;

-- ---------------------------------------------------------------------------------------
-- Row level security on tool_jobs.
alter table tool_jobs enable row level security;

-- Reading is governed by GRANT alone (every group may read every call; the auditor's whole job).
create policy tool_jobs_read on tool_jobs for select using (true);

-- A client-made call starts with no history: the trigger already makes it queued with no owner,
-- token 0 and no attempts; nor may it arrive pre-approved, pre-started or pre-finished.
create policy tool_jobs_insert_new on tool_jobs for insert
    with check (state = 'queued' and owner_id is null and fencing_token = 0 and attempt = 0
                and extra_attempts = 0 and lease_until is null and heartbeat_at is null
                and claimed_at is null and finished_at is null and cancel_requested_at is null
                and cancel_requested_by is null and side_effect_started_at is null
                and external_request_id is null and retry_approved_by is null
                and retry_approved_at is null and terminal_reason is null and result is null
                and error is null and not completed_despite_cancel);

do $$
begin
    if exists (select 1 from pg_roles where rolname = 'leasectl_worker') then
        -- USING: the rows a worker may touch at all --
        --   (a) its own live calls (heartbeat, start, complete, fail, confirm, report unknown);
        --   (b) queued calls, to claim them (the queued guard forbids any other change);
        --   (c) running calls whose lease ran out, to reclaim them (the guard trigger decides
        --       whether that is safe; LCS06/LCS07).
        -- Anything else -- another worker's live call, any outcome_unknown or cancel_requested
        -- call not its own, a terminal call -- matches nothing: the guarded statements answer
        -- zero rows, and a bare `update ... set lease_until = ...` changes nothing.
        -- WITH CHECK: what it leaves behind is its own (bound) call, or a call back in the queue
        -- with no owner and no lease (fail.sql's requeue).
        create policy tool_jobs_worker_update on tool_jobs for update to leasectl_worker
            using (state = 'queued'
                   or (state = 'running' and lease_until < now())
                   or (state in ('running', 'cancel_requested') and lease_until > now()
                       and leasectl_worker_id_bound(owner_id)))
            with check (leasectl_worker_id_bound(owner_id)
                        or (state = 'queued' and owner_id is null and lease_until is null));
        grant execute on function leasectl_enqueue(text, text, jsonb, text, text, timestamptz, text, text)
            to leasectl_worker;
        -- the upsert of enqueue.sql was the only use; it runs as the owner now
        revoke update (idempotency_key) on tool_jobs from leasectl_worker;
    end if;
    if exists (select 1 from pg_roles where rolname = 'leasectl_supervisor') then
        -- the sweep, a shutdown's cancels and the fencing of unconfirmed cancels: the control plane
        -- ends or requeues live calls, never grants ownership (nothing it writes is running, a
        -- requeued call has no owner) and never settles an unknown outcome or claims a success
        create policy tool_jobs_supervisor_update on tool_jobs for update to leasectl_supervisor
            using (state in ('queued', 'running', 'cancel_requested'))
            with check (state in ('queued', 'cancel_requested', 'cancelled', 'failed', 'outcome_unknown')
                        and (state <> 'queued' or owner_id is null));
    end if;
    if exists (select 1 from pg_roles where rolname = 'leasectl_operator') then
        -- operators act only through the functions: the guard, the change and its journal row in
        -- one statement, so a decision without its record cannot exist
        revoke update on tool_jobs from leasectl_operator;
        revoke insert on job_events from leasectl_operator;
        grant execute on function leasectl_request_cancel(uuid, text, bigint, text, text),
                                  leasectl_mark_terminal(uuid, text, bigint, text, text, text, boolean),
                                  leasectl_approve_retry(uuid, text, bigint, text, text),
                                  leasectl_journal_failure(uuid, text, text, text, text, text, bigint, uuid, text)
            to leasectl_operator;
    end if;
end $$;

insert into leasectl_migrations (version, name) values (5, '0005_trust')
on conflict (version) do nothing;
