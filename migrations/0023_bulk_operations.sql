-- 0023: bulk operations of any size (issue 30, "The team's tools").
--
-- A bulk action over more than 1,000 calls (or one started with --background) is no longer refused:
-- it becomes an operation, worked in batches by the CLI (in the foreground, with its progress) or by
-- the supervisor (in the background), resumable after a crash with no call acted on twice and none
-- skipped, and stoppable.
--
--   bulk_operations        one row per operation: id, action, filter, total, done, refused, state,
--                          operator (the contract's names), and applied / failed / skipped beside
--                          refused, the choices (terminal_state, force), the reason, created_at,
--                          db_role (the login that started it, set by the database), updated_at,
--                          who asked it to stop and when, the last error a worker met.
--   bulk_operation_calls   the set of calls, frozen when the operation is made: each call with the
--                          state and fencing token read for it in the plan's snapshot (the guard its
--                          action is sent with, whenever its batch comes) and, once its batch has
--                          committed, its outcome (applied, refused, failed; skipped for the calls
--                          the plan could not send), why, and the request id its journal row has.
--
-- The state of an operation:
--
--     running --(every call settled)--> finished
--        |
--        +--(leasectl bulk stop)--> stopping --(the batches in flight have committed)--> stopped
--                                       |
--                                       +--(every call settled before that)--> finished
--
-- Exactly once, whoever works it and whatever dies:
--   * a batch is one transaction: leasectl_bulk_next locks up to N unsettled calls of a running
--     operation (FOR UPDATE SKIP LOCKED: two workers, the CLI and the supervisor say, never take the
--     same call, and a call settled meanwhile is re-checked and left out), each call is sent through
--     its action's own guarded operator statement (queries/operator/*.sql, with the state and token
--     frozen for it: a call that changed since the plan is refused and journaled as refused, never
--     acted on blind), and leasectl_bulk_settle records its outcome in that same transaction, taken
--     from the journal row the guard wrote (the database's word, not the client's). A crash anywhere
--     in a batch rolls the actions and their outcomes back together; a crash after its commit leaves
--     both. So the unsettled calls are exactly the calls not acted on, and a resumed worker takes them.
--   * the counters (done, applied, refused, failed) are counted by the database, at commit, from the
--     outcomes themselves (a deferred constraint trigger): they cannot drift from the calls. The last
--     settled call's commit finishes the operation and journals it.
--   * a batch share-locks its operation's key (FOR KEY SHARE): a stop (a plain update) never waits for
--     a batch, but stopping -> stopped (leasectl_bulk_close, FOR UPDATE) waits until the batches in
--     flight have committed, so nothing is settled after an operation says it stopped.
--
-- Who may (the database decides, for any SQL): an operator login starts and stops an operation
-- (leasectl_bulk_create, leasectl_bulk_stop); an operator login or the control plane
-- (leasectl_supervisor) works one (leasectl_bulk_next, _settle, _close, _note_error). Nobody writes
-- the tables directly; the worker group may not even read them; the auditor reads them; a read-only
-- session writes nothing. The supervisor may now run the guarded operator statements, but only to
-- carry out an operation an operator started: leasectl_operator_journal (every operator statement
-- journals through it before it changes anything) refuses an operator kind from a login that is not
-- an operator unless the transaction's batch id names a running or stopping operation of that action,
-- by that operator and reason, with its choices, holding that call unsettled under the very state and
-- token the statement was sent with. So an unknown outcome is still left only by a decision an
-- operator typed and confirmed.
--
-- The journal: every call's row (job_events operator_<action>, applied or refused, or
-- operator_action_failed) carries details.batch_id = the operation's id; the operation itself is
-- journaled in fleet_events beside the other operator acts on no one call: bulk_started (when it is
-- made), bulk_stop_requested (and bulk_stop_refused: it was not running), bulk_stopped and
-- bulk_finished, each with details.operation_id, the action and the counts.
--
-- Runnable with `psql -v ON_ERROR_STOP=1 -f` and by `leasectl migrate`. Every function follows
-- 0012's rule (search_path = pg_catalog, public, pg_temp; every name schema-qualified).

create table public.bulk_operations (
    id                 uuid primary key default pg_catalog.gen_random_uuid(),
    -- an action of console/core/actions.py (cancel, mark_terminal, approve_retry): its operator kind
    action             text not null,
    -- the filter as typed (`--where`), null for calls marked one by one
    filter             text check (length(filter) <= 2000),
    -- the action's own parameters as chosen (terminal_state, force), sent with every call
    choices            jsonb not null default '{}'::jsonb check (pg_catalog.jsonb_typeof(choices) = 'object'),
    operator           text not null check (length(operator) between 1 and 200),
    reason             text not null check (length(reason) between 1 and 1000),
    total              integer not null check (total > 0),
    skipped            integer not null default 0 check (skipped >= 0),
    done               integer not null default 0,
    applied            integer not null default 0,
    refused            integer not null default 0,
    failed             integer not null default 0,
    state              text not null default 'running'
                       check (state in ('running', 'stopping', 'stopped', 'finished')),
    -- started for the supervisor to work (--background), not by the CLI that made it
    background         boolean not null default false,
    created_at         timestamptz not null default now(),
    db_role            text not null default session_user,
    request_id         uuid,
    updated_at         timestamptz not null default now(),
    worked_by          text,
    stop_requested_by  text check (length(stop_requested_by) <= 200),
    stop_requested_at  timestamptz,
    stop_reason        text check (length(stop_reason) <= 1000),
    finished_at        timestamptz,
    error              text check (length(error) <= 2000),
    error_at           timestamptz,
    constraint bulk_operations_counted check (done = applied + refused + failed and done between 0 and total)
);

comment on table public.bulk_operations is
    'Bulk operations: a bulk action over a frozen set of calls, worked in batches (migration 0023).';
comment on column public.bulk_operations.db_role is
    'The database login that started the operation (set by the database).';
comment on column public.bulk_operations.total is
    'Calls the operation sends (the plan''s calls, skipped ones not counted).';
comment on column public.bulk_operations.done is
    'Calls settled so far (applied + refused + failed), counted by the database at each batch''s commit.';

create index bulk_operations_created_idx on public.bulk_operations (created_at);
create index bulk_operations_live_idx on public.bulk_operations (created_at) where state in ('running', 'stopping');

create table public.bulk_operation_calls (
    operation_id  uuid not null references public.bulk_operations (id) on delete cascade,
    -- the order the calls are worked in (the plan's)
    ordinal       integer not null,
    job_id        uuid not null,   -- no FK: the record outlives any cleanup of tool_jobs
    seen_state    text not null,
    seen_token    bigint not null,
    outcome       text check (outcome in ('applied', 'refused', 'failed', 'skipped')),
    why           text,
    request_id    uuid,
    settled_at    timestamptz,
    worked_by     text,
    primary key (operation_id, job_id)
);

comment on table public.bulk_operation_calls is
    'The calls of each bulk operation, frozen with the state and token read for each, and each one''s outcome.';

-- the next batch: the unsettled calls of an operation in their order
create index bulk_operation_calls_pending_idx on public.bulk_operation_calls (operation_id, ordinal)
    where outcome is null;
-- what was not applied (status, the console's progress): few, by design
create index bulk_operation_calls_not_applied_idx on public.bulk_operation_calls (operation_id, ordinal)
    where outcome in ('refused', 'failed', 'skipped');


-- ---------------------------------------------------------------------------------------
-- An operator login: a member of leasectl_operator, the schema owner or a superuser, by the
-- session's login (inside a SECURITY DEFINER function current_user is the owner). Reads nothing:
-- plain SQL, inlinable, names qualified (0012).
create function public.leasectl_is_operator_login() returns boolean
language sql stable as $$
    select pg_catalog.current_setting('is_superuser') operator(pg_catalog.=) 'on'
        or session_user operator(pg_catalog.=) public.leasectl_schema_owner()
        or coalesce(pg_catalog.pg_has_role(session_user, pg_catalog.to_regrole('leasectl_operator'), 'USAGE'),
                    false)
$$;

-- Who may work an operation: an operator login, or the control plane's (a login that may write
-- reconciliation records: 0012's test, asked of the login, not of the definer's current_user);
-- never a worker login.
create function public.leasectl_bulk_may_work() returns void
language plpgsql stable set search_path = pg_catalog, public, pg_temp as $$
begin
    if public.leasectl_is_worker_login()
       or not (public.leasectl_is_operator_login()
               or pg_catalog.has_table_privilege(session_user, 'public.reconciliation_records', 'INSERT')) then
        raise exception 'login % may not work a bulk operation: only an operator login or the control plane does',
            session_user using errcode = '42501';
    end if;
end $$;


-- ---------------------------------------------------------------------------------------
-- The operator journal, 0015's, with one rule more (marked 0023): a login that is not an operator
-- writes an operator kind only to carry out a bulk operation an operator started, for a call frozen
-- in it, with the state and token frozen for it (the supervisor's background work).
-- Whether this transaction holds a bulk call's row lock, the one leasectl_bulk_next took (FOR
-- UPDATE: the row's xmax is then the locking transaction's id; pg_current_xact_id() is the
-- top-level transaction's, which is where the batch takes its calls). What the journal's check and
-- leasectl_bulk_settle ask: a call is acted on and settled only inside the batch that took it.
create function public.leasectl_bulk_taken_here(p_xmax xid) returns boolean
language sql volatile set search_path = pg_catalog, public, pg_temp as $$
    select p_xmax operator(pg_catalog.=) pg_catalog.pg_current_xact_id()::xid
$$;
revoke execute on function public.leasectl_bulk_taken_here(xid) from public;

create or replace function public.leasectl_operator_journal(p_kind text, p_job_id uuid, p_actor text, p_fencing_token bigint, p_state_from text, p_state_to text, p_owner_from text, p_owner_to text, p_reason text, p_details jsonb, p_request_id uuid DEFAULT NULL::uuid)
returns public.job_events
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
declare
    v_row   public.job_events;
    v_batch uuid := nullif(pg_catalog.current_setting('leasectl.batch_id', true), '')::uuid;
begin
    -- (0013) a decision carries a person's name: an empty one is refused, not journaled
    if coalesce(btrim(p_actor), '') = '' then
        raise exception 'an operator name is required: it is journaled with the decision' using errcode = '22023';
    end if;
    -- (0015) a name of blanks (a tab, a no-break or zero-width space) names nobody; what is
    -- journaled stays within 64 KiB
    if p_actor !~ '[[:alnum:]]' then
        raise exception 'an operator''s name holds a letter or a digit' using errcode = 'check_violation',
            constraint = 'job_events_operator_named';
    end if;
    if octet_length(p_details::text) > 65536 then
        raise exception 'the details of a journal row stay within 64 KiB' using errcode = 'check_violation',
            constraint = 'job_events_details_bounded';
    end if;
    -- (0023) the control plane carries out an operator's bulk operation, and nothing else
    if not public.leasectl_is_operator_login() then
        if v_batch is null or not exists (
            select 1
            from public.bulk_operations o
            join public.bulk_operation_calls c on c.operation_id = o.id
            where o.id = v_batch
              and o.state in ('running', 'stopping')
              and c.job_id = p_job_id
              and c.outcome is null
              -- taken by this transaction's leasectl_bulk_next (its row lock): a call is acted on
              -- only inside the batch that settles it, never beside one (and never after a stop)
              and public.leasectl_bulk_taken_here(c.xmax)
              and (p_kind = 'operator_' || o.action
                   or (p_kind = 'operator_action_failed' and p_details ->> 'action' = o.action))
              and c.seen_state = p_details ->> 'seen_state'
              and c.seen_token = (p_details ->> 'seen_token')::bigint
              and o.operator = p_actor
              and o.reason is not distinct from p_reason
              and (p_kind = 'operator_action_failed' or p_details @> o.choices)) then
            raise exception 'login % is no operator: it acts on a call only to carry out a bulk operation an operator started, for a call frozen in it (call %)',
                session_user, p_job_id using errcode = '42501';
        end if;
    end if;
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
    perform pg_catalog.pg_notify('leasectl_jobs',
                                 pg_catalog.json_build_object('id', v_row.job_id, 'kind', v_row.kind)::text);
    return v_row;
end $$;


-- ---------------------------------------------------------------------------------------
-- The operation's own journal rows (fleet_events, beside shutdowns, pauses and revocations), and
-- the wake-up of the supervisor and the consoles.
create function public.leasectl_bulk_journal(p_kind text, p_op public.bulk_operations, p_actor text, p_reason text,
                                             p_details jsonb) returns void
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
begin
    insert into public.fleet_events (kind, actor, reason, request_id, details)
    values (p_kind, p_actor, p_reason,
            coalesce(nullif(pg_catalog.current_setting('leasectl.request_id', true), '')::uuid, p_op.request_id),
            pg_catalog.jsonb_build_object('operation_id', p_op.id, 'action', p_op.action, 'filter', p_op.filter,
                                          'total', p_op.total, 'done', p_op.done, 'applied', p_op.applied,
                                          'refused', p_op.refused, 'failed', p_op.failed,
                                          'skipped', p_op.skipped, 'state', p_op.state)
            operator(pg_catalog.||) coalesce(p_details, '{}'::jsonb));
    perform pg_catalog.pg_notify('leasectl_fleet',
                                 pg_catalog.json_build_object('table', 'bulk_operations', 'op', p_kind,
                                                              'id', p_op.id)::text);
end $$;


-- ---------------------------------------------------------------------------------------
-- Start: the operation and its frozen calls in one statement (the plan's snapshot, as confirmed),
-- the skipped calls recorded with why, the start journaled. An operator login only.
create function public.leasectl_bulk_create(
    p_action text, p_filter text, p_choices jsonb, p_operator text, p_reason text, p_background boolean,
    p_job_ids uuid[], p_seen_states text[], p_seen_tokens bigint[],
    p_skipped_ids uuid[], p_skipped_states text[], p_skipped_tokens bigint[], p_skipped_why text[])
returns setof public.bulk_operations
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    v_op public.bulk_operations;
    v_n  integer := coalesce(pg_catalog.cardinality(p_job_ids), 0);
    v_k  integer := coalesce(pg_catalog.cardinality(p_skipped_ids), 0);
begin
    if public.leasectl_is_worker_login() or not public.leasectl_is_operator_login() then
        raise exception 'login % may not start a bulk operation: only an operator login does', session_user
            using errcode = '42501';
    end if;
    if coalesce(p_operator ~ '[[:alnum:]]' and btrim(p_reason) <> '', false) is false then
        raise exception 'an operator name and a reason are required: both are journaled with the operation'
            using errcode = '22023';
    end if;
    if p_action is null or p_action = 'action_failed'
       or not public.leasectl_is_operator_event('operator_' || p_action) then
        raise exception 'no action %: cancel, mark_terminal or approve_retry', coalesce(p_action, '(none)')
            using errcode = '22023';
    end if;
    if v_n = 0 then
        raise exception 'a bulk operation sends at least one call' using errcode = '22023';
    end if;
    -- the choices are the operator's, whole: the control plane carrying the operation out sends
    -- exactly these (the journal's check compares them), so none may be left for it to pick
    if not coalesce(case p_action
                        when 'mark_terminal' then
                            (select pg_catalog.array_agg(k order by k) from pg_catalog.jsonb_object_keys(p_choices) k)
                                = array['force', 'terminal_state']
                            and p_choices ->> 'terminal_state' in ('succeeded', 'failed', 'cancelled')
                            and pg_catalog.jsonb_typeof(p_choices -> 'force') = 'boolean'
                        else coalesce(p_choices, '{}'::jsonb) = '{}'::jsonb end, false) then
        raise exception 'the choices % are not those of %: mark_terminal takes terminal_state (succeeded, failed or cancelled) and force (true or false), the others none',
            coalesce(p_choices::text, 'null'), p_action using errcode = '22023';
    end if;
    if coalesce(pg_catalog.cardinality(p_seen_states), -1) <> v_n
       or coalesce(pg_catalog.cardinality(p_seen_tokens), -1) <> v_n
       or coalesce(pg_catalog.cardinality(p_skipped_states), 0) <> v_k
       or coalesce(pg_catalog.cardinality(p_skipped_tokens), 0) <> v_k
       or coalesce(pg_catalog.cardinality(p_skipped_why), 0) <> v_k
       or pg_catalog.array_position(p_job_ids, null) is not null
       or pg_catalog.array_position(p_seen_states, null) is not null
       or pg_catalog.array_position(p_seen_tokens, null) is not null then
        raise exception 'every call of a bulk operation comes with the state and token read for it'
            using errcode = '22023';
    end if;
    insert into public.bulk_operations (action, filter, choices, operator, reason, total, skipped, background,
                                        db_role, request_id)
    values (p_action, p_filter, coalesce(p_choices, '{}'::jsonb), p_operator, p_reason, v_n, v_k,
            coalesce(p_background, false), session_user,
            coalesce(nullif(pg_catalog.current_setting('leasectl.request_id', true), '')::uuid,
                     pg_catalog.gen_random_uuid()))
    returning * into v_op;
    insert into public.bulk_operation_calls (operation_id, ordinal, job_id, seen_state, seen_token)
    select v_op.id, u.n::integer, u.job_id, u.seen_state, u.seen_token
    from unnest(p_job_ids, p_seen_states, p_seen_tokens) with ordinality as u(job_id, seen_state, seen_token, n);
    if v_k > 0 then
        insert into public.bulk_operation_calls (operation_id, ordinal, job_id, seen_state, seen_token, outcome,
                                                 why, settled_at)
        select v_op.id, v_n + u.n::integer, u.job_id, u.seen_state, u.seen_token, 'skipped', u.why, now()
        from unnest(p_skipped_ids, p_skipped_states, p_skipped_tokens, p_skipped_why)
             with ordinality as u(job_id, seen_state, seen_token, why, n);
    end if;
    perform public.leasectl_bulk_journal('bulk_started', v_op, p_operator, p_reason,
                                         pg_catalog.jsonb_build_object('choices', v_op.choices,
                                                                       'background', v_op.background));
    return next v_op;
end $$;


-- ---------------------------------------------------------------------------------------
-- The next batch: up to p_limit unsettled calls of a running operation, locked for this
-- transaction (skipping those another worker holds), in their order. Nothing once the operation is
-- not running (stopping, stopped, finished) or is no operation at all.
create function public.leasectl_bulk_next(p_operation_id uuid, p_limit integer)
returns table (job_id uuid, seen_state text, seen_token bigint, ordinal integer)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
#variable_conflict use_column
declare
    v_state text;
begin
    perform public.leasectl_bulk_may_work();
    if p_limit is null or p_limit < 1 or p_limit > 10000 then
        raise exception 'a batch holds 1 to 10000 calls, not %', coalesce(p_limit::text, 'null')
            using errcode = '22023';
    end if;
    -- the key share lock: stopping -> stopped (leasectl_bulk_close) waits for this batch's commit
    select o.state into v_state from public.bulk_operations o where o.id = p_operation_id for key share of o;
    if v_state is distinct from 'running' then
        return;
    end if;
    return query
        select c.job_id, c.seen_state, c.seen_token, c.ordinal
        from public.bulk_operation_calls c
        where c.operation_id = p_operation_id and c.outcome is null
        order by c.ordinal
        limit p_limit
        for update of c skip locked;
end $$;


-- ---------------------------------------------------------------------------------------
-- A call's outcome, in the transaction that sent it: what the journal row its guarded statement
-- wrote in this transaction (this call, this operation's batch id) says -- the database's word,
-- never the client's. applied and refused need that row (its request id is recorded with the
-- outcome); failed is the operator_action_failed row, or, where the failure could not be journaled,
-- the error the worker met (the call was not acted on either way); a call that no longer exists
-- journals nothing and is refused. A call not part of the operation, or settled already, is refused
-- by an error, which undoes the whole batch.
--   Its statements keep one plan each (plan_cache_mode): the console's sessions plan every statement
--   with its values (console/shared/config.py), and planning the look-up in the partitioned history
--   anew cost more than the rest of the call (0.3 ms; the month's partition is found at execution).
create function public.leasectl_bulk_settle(p_operation_id uuid, p_job_id uuid, p_error text, p_worker text)
returns table (outcome text, why text, request_id uuid)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp
set plan_cache_mode = force_generic_plan as $$
#variable_conflict use_column
declare
    v_action  text;
    v_outcome text;
    v_why     text;
    v_request uuid;
    v_settled text;
    e         record;
begin
    perform public.leasectl_bulk_may_work();
    select o.action into v_action from public.bulk_operations o
    where o.id = p_operation_id and o.state in ('running', 'stopping');
    if not found then
        raise exception 'no bulk operation % being worked', p_operation_id using errcode = '22023';
    end if;
    -- only a call this transaction's leasectl_bulk_next took: a call settled without being taken
    -- (and sent) in the same transaction would be an outcome nobody's statement had
    if not exists (select 1 from public.bulk_operation_calls c
                   where c.operation_id = p_operation_id and c.job_id = p_job_id and c.outcome is null
                     and public.leasectl_bulk_taken_here(c.xmax)) then
        raise exception 'call % is not an unsettled call of bulk operation % taken by this transaction',
            p_job_id, p_operation_id using errcode = '55000';
    end if;
    -- this transaction's row (its history's partition is this month's: at is the transaction's now())
    select j.kind, j.details, j.request_id into e
    from public.job_events j
    where j.job_id = p_job_id and j.at = pg_catalog.now()
      and j.details ->> 'batch_id' = p_operation_id::text
      and (j.kind = 'operator_' || v_action
           or (j.kind = 'operator_action_failed' and j.details ->> 'action' = v_action))
    order by j.id desc
    limit 1;
    if found then
        v_request := e.request_id;
        if e.kind = 'operator_action_failed' then
            v_outcome := 'failed';
            v_why := coalesce(e.details ->> 'error', 'not applied');
        elsif e.details ->> 'outcome' in ('applied', 'refused') then
            v_outcome := e.details ->> 'outcome';
            v_why := e.details ->> 'refusal';
        else
            raise exception 'the journal row of call % says no outcome', p_job_id using errcode = '22023';
        end if;
    elsif p_error is not null then
        v_outcome := 'failed';
        v_why := left(p_error, 1000);
    elsif not exists (select 1 from public.tool_jobs j where j.id = p_job_id) then
        v_outcome := 'refused';
        v_why := 'no such call any more: nothing was sent';
    else
        raise exception 'call % was not sent in this transaction: no journal row of it, no error', p_job_id
            using errcode = '55000';
    end if;
    -- by its primary key (a condition on outcome would send the planner to the pending calls' index,
    -- and through every pending call of the operation), locked, then checked
    select c.outcome into v_settled from public.bulk_operation_calls c
    where c.operation_id = p_operation_id and c.job_id = p_job_id
    for update of c;
    if not found or v_settled is not null then
        raise exception 'call % is not an unsettled call of bulk operation %', p_job_id, p_operation_id
            using errcode = '55000';
    end if;
    update public.bulk_operation_calls c
    set outcome = v_outcome, why = v_why, request_id = v_request, settled_at = pg_catalog.now(),
        worked_by = left(p_worker, 200)
    where c.operation_id = p_operation_id and c.job_id = p_job_id;
    return query select v_outcome, v_why, v_request;
end $$;


-- ---------------------------------------------------------------------------------------
-- The counters, counted at commit from the outcomes (a deferred constraint trigger, so a batch
-- holds its operation's row only while it commits); the last settled call finishes the operation.
create function public.leasectl_bulk_count() returns trigger
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    v_op public.bulk_operations;
begin
    update public.bulk_operations o
    set done       = o.done + 1,
        applied    = o.applied + (new.outcome = 'applied')::integer,
        refused    = o.refused + (new.outcome = 'refused')::integer,
        failed     = o.failed + (new.outcome = 'failed')::integer,
        updated_at = pg_catalog.now(),
        worked_by  = coalesce(new.worked_by, o.worked_by)
    where o.id = new.operation_id
    returning o.* into v_op;
    if v_op.done = v_op.total and v_op.state in ('running', 'stopping') then
        update public.bulk_operations o
        set state = 'finished', finished_at = pg_catalog.now()
        where o.id = v_op.id
        returning o.* into v_op;
        perform public.leasectl_bulk_journal('bulk_finished', v_op, v_op.operator, v_op.reason,
                                             pg_catalog.jsonb_build_object('worked_by', new.worked_by));
    end if;
    return null;
end $$;

create constraint trigger bulk_operation_calls_count
    after update of outcome on public.bulk_operation_calls
    deferrable initially deferred
    for each row when (old.outcome is null and new.outcome is not null and new.outcome <> 'skipped')
    execute function public.leasectl_bulk_count();


-- ---------------------------------------------------------------------------------------
-- Stop: running -> stopping (the batches in flight finish; no new batch begins), journaled; a stop
-- of an operation that is not running is refused and journaled (zero rows). An operator login only.
create function public.leasectl_bulk_stop(p_operation_id uuid, p_operator text, p_reason text)
returns setof public.bulk_operations
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    v_op public.bulk_operations;
begin
    if public.leasectl_is_worker_login() or not public.leasectl_is_operator_login() then
        raise exception 'login % may not stop a bulk operation: only an operator login does', session_user
            using errcode = '42501';
    end if;
    if coalesce(p_operator ~ '[[:alnum:]]' and btrim(p_reason) <> '', false) is false then
        raise exception 'an operator name and a reason are required: both are journaled with the stop'
            using errcode = '22023';
    end if;
    update public.bulk_operations o
    set state = 'stopping', stop_requested_by = p_operator, stop_requested_at = pg_catalog.now(),
        stop_reason = p_reason, updated_at = pg_catalog.now()
    where o.id = p_operation_id and o.state = 'running'
    returning o.* into v_op;
    if found then
        perform public.leasectl_bulk_journal('bulk_stop_requested', v_op, p_operator, p_reason, '{}'::jsonb);
        return next v_op;
        return;
    end if;
    select * into v_op from public.bulk_operations o where o.id = p_operation_id;
    if found and v_op.state in ('stopped', 'finished') then
        perform public.leasectl_bulk_journal('bulk_stop_refused', v_op, p_operator, p_reason,
                                             pg_catalog.jsonb_build_object('refusal',
                                                 'the operation is ' || v_op.state || ': there is nothing to stop'));
    end if;
    return;  -- no such operation (nothing journaled), stopping already, or over
end $$;


-- ---------------------------------------------------------------------------------------
-- Close: once the batches in flight have committed (this waits for their key share locks),
-- stopping -> stopped, journaled with what was left unsent. The operation as it is now.
create function public.leasectl_bulk_close(p_operation_id uuid, p_worker text)
returns setof public.bulk_operations
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    v_op public.bulk_operations;
begin
    perform public.leasectl_bulk_may_work();
    select * into v_op from public.bulk_operations o where o.id = p_operation_id for update of o;
    if not found then
        return;
    end if;
    if v_op.state = 'stopping' then
        update public.bulk_operations o
        set state = 'stopped', finished_at = pg_catalog.now(), updated_at = pg_catalog.now()
        where o.id = v_op.id
        returning o.* into v_op;
        perform public.leasectl_bulk_journal('bulk_stopped', v_op, v_op.stop_requested_by, v_op.stop_reason,
                                             pg_catalog.jsonb_build_object('not_sent', v_op.total - v_op.done,
                                                                           'closed_by', p_worker));
    end if;
    return next v_op;
end $$;


-- ---------------------------------------------------------------------------------------
-- The last error a worker met on an operation (a batch that could not commit: the database went
-- away, a permission the login lacks), shown with its progress. Nothing of the batch was applied.
create function public.leasectl_bulk_note_error(p_operation_id uuid, p_error text, p_worker text)
returns setof public.bulk_operations
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
begin
    perform public.leasectl_bulk_may_work();
    return query
        update public.bulk_operations o
        set error = left(p_error, 2000), error_at = pg_catalog.now(),
            worked_by = coalesce(left(p_worker, 200), o.worked_by)
        where o.id = p_operation_id
        returning o.*;
end $$;


-- ---------------------------------------------------------------------------------------
-- The operator journal's fleet rows gain the operations' (audit/operator_actions.sql; 0021's
-- indexes, for the new kinds). A query that names fewer kinds than an index's predicate still
-- uses it (its list implies the index's).
drop index public.fleet_events_operator_idx;
drop index public.fleet_events_operator_at_idx;
create index fleet_events_operator_idx on public.fleet_events (actor, at)
    where kind in ('shutdown_requested', 'shutdown_refused', 'tool_paused', 'tool_resumed', 'operator_revoke',
                   'shutdown_accepted', 'shutdown_declined', 'history_archived', 'bulk_started',
                   'bulk_stop_requested', 'bulk_stop_refused', 'bulk_stopped', 'bulk_finished');
create index fleet_events_operator_at_idx on public.fleet_events (at)
    where kind in ('shutdown_requested', 'shutdown_refused', 'tool_paused', 'tool_resumed', 'operator_revoke',
                   'shutdown_accepted', 'shutdown_declined', 'history_archived', 'bulk_started',
                   'bulk_stop_requested', 'bulk_stop_refused', 'bulk_stopped', 'bulk_finished');


-- ---------------------------------------------------------------------------------------
-- Privileges: nobody writes the tables but these functions; operators, the control plane and the
-- auditor read them; a worker login gets nothing.
revoke all on public.bulk_operations, public.bulk_operation_calls from public;
revoke all on function public.leasectl_bulk_may_work() from public;
revoke all on function public.leasectl_bulk_journal(text, public.bulk_operations, text, text, jsonb) from public;
revoke all on function public.leasectl_bulk_create(text, text, jsonb, text, text, boolean, uuid[], text[], bigint[],
                                                   uuid[], text[], bigint[], text[]) from public;
revoke all on function public.leasectl_bulk_next(uuid, integer) from public;
revoke all on function public.leasectl_bulk_settle(uuid, uuid, text, text) from public;
revoke all on function public.leasectl_bulk_count() from public;
revoke all on function public.leasectl_bulk_stop(uuid, text, text) from public;
revoke all on function public.leasectl_bulk_close(uuid, text) from public;
revoke all on function public.leasectl_bulk_note_error(uuid, text, text) from public;

do $$
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_operator') then
        grant select on public.bulk_operations, public.bulk_operation_calls to leasectl_operator;
        grant execute on function
            public.leasectl_bulk_create(text, text, jsonb, text, text, boolean, uuid[], text[], bigint[], uuid[],
                                        text[], bigint[], text[]),
            public.leasectl_bulk_stop(uuid, text, text)
            to leasectl_operator;
        grant execute on function
            public.leasectl_bulk_next(uuid, integer),
            public.leasectl_bulk_settle(uuid, uuid, text, text),
            public.leasectl_bulk_close(uuid, text),
            public.leasectl_bulk_note_error(uuid, text, text)
            to leasectl_operator;
    end if;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_supervisor') then
        grant select on public.bulk_operations, public.bulk_operation_calls to leasectl_supervisor;
        grant execute on function
            public.leasectl_bulk_next(uuid, integer),
            public.leasectl_bulk_settle(uuid, uuid, text, text),
            public.leasectl_bulk_close(uuid, text),
            public.leasectl_bulk_note_error(uuid, text, text)
            to leasectl_supervisor;
        -- the guarded operator statements, to carry out an operator's operation: the journal's rule
        -- above refuses them for anything else
        grant execute on function
            public.leasectl_request_cancel(uuid, text, bigint, text, text),
            public.leasectl_mark_terminal(uuid, text, bigint, text, text, text, boolean),
            public.leasectl_approve_retry(uuid, text, bigint, text, text),
            public.leasectl_journal_failure(uuid, text, text, text, text, text, bigint, uuid, text)
            to leasectl_supervisor;
    end if;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_auditor') then
        grant select on public.bulk_operations, public.bulk_operation_calls to leasectl_auditor;
    end if;
end $$;

select public.leasectl_give_to_owner('public.leasectl_bulk_journal(text, public.bulk_operations, text, text, jsonb)');
select public.leasectl_give_to_owner('public.leasectl_bulk_create(text, text, jsonb, text, text, boolean, uuid[], text[], bigint[], uuid[], text[], bigint[], text[])');
select public.leasectl_give_to_owner('public.leasectl_bulk_taken_here(xid)');
select public.leasectl_give_to_owner('public.leasectl_bulk_next(uuid, integer)');
select public.leasectl_give_to_owner('public.leasectl_bulk_settle(uuid, uuid, text, text)');
select public.leasectl_give_to_owner('public.leasectl_bulk_count()');
select public.leasectl_give_to_owner('public.leasectl_bulk_stop(uuid, text, text)');
select public.leasectl_give_to_owner('public.leasectl_bulk_close(uuid, text)');
select public.leasectl_give_to_owner('public.leasectl_bulk_note_error(uuid, text, text)');

insert into leasectl_migrations (version, name) values (23, '0023_bulk_operations')
on conflict (version) do nothing;
