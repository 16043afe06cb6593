-- 0015: the trust boundary, third walk. A tester with worker, operator and auditor logins attacked
-- a database migrated to 0013 with any SQL it liked. What got through, and the rule that closes it:
--
--   a payment sent twice  a worker set the side-effect mark and requeued its call in one UPDATE:
--                         the requeue rule read only the mark before the update. A request starts
--                         only on a running call that stays running under the same owner and
--                         token with a live lease (LCS07), and the requeue rule reads both sides.
--                         A hand-written claim also respected no max_attempts: a grant needs an
--                         attempt left (LCS11).
--   any call row-locked   leasectl_enqueue's ON CONFLICT DO UPDATE locked an existing row past row
--                         level security, and a transaction held open kept another worker's
--                         heartbeats waiting until its lease ran out. Enqueue now looks first, then
--                         inserts with DO NOTHING: it locks nothing it did not create (and no
--                         longer registers a tool for a key that exists). A next stage's key
--                         taken first by another call is not handed over as that stage.
--   locks held for ever   a worker held an agent's row (leasectl_agent_state, an insert for that
--                         agent) or a call's, in a transaction left open with its timeouts set to 0:
--                         drains stalled, heartbeats waited. No worker or operator login may keep
--                         a transaction that holds leasectl's tables open for longer than the
--                         control plane allows: leasectl_end_lock_holders, run by the
--                         supervisor every tick, ends such sessions and journals it
--                         (fleet_events: session_ended).
--   a drain pre-empted    a worker registered an agent named like an operator inside a subtree,
--                         and that operator's drain was refused (LCF01). The rule is for agents:
--                         a login may not shut down a subtree holding an agent it registered
--                         under the name it asks in; an operator's name is not an agent's.
--   a window of NaN       a shutdown window of NaN or 1e300 broke the supervisor and the Fleet
--                         view for everyone: a window lies between 0 and 7 days.
--   leases unbounded      a worker wrote a lease till the year 9000, a running call with no lease,
--                         a claim time in the future: a running call has a lease; a lease ends
--                         within a day and a heartbeat within its lease; a claim time changes
--                         only with a claim, a request's start and a finish are dated now; a
--                         finish is never before the call was made.
--   a completion rewrote  a worker's completion co-wrote a finish in 2001, attempt 0, "completed
--   its story             despite cancel" without a cancel and an operator's words as the reason.
--                         A worker's ending is dated now, the attempt counts claims only, a
--                         completion despite a cancel needs a cancel, and "marked ... by" is an
--                         operator's phrase (LCS11).
--   calls for any agent   a worker enqueued calls for an agent it never registered, or for none
--                         that exists: a worker login's call names an agent registered by that
--                         login or under one it registered (LCF08).
--   names of blanks       an operator name of a tab, a no-break or a zero-width space was journaled:
--                         an operator's name holds a letter or a digit.
--   a journal of 10 MB    a worker's report carried 10 MB of details into the append-only journal:
--                         a journal row's details stay within 64 KiB.
-- Earlier rows stay as they were written: the new checks are NOT VALID.

-- ---------------------------------------------------------------------------------------
-- Bounds, checked on every write (a heartbeat included: a check costs nothing a HOT update needs).

alter table public.tool_jobs
    add constraint tool_jobs_running_has_a_lease
        check (state not in ('running', 'cancel_requested') or lease_until is not null) not valid,
    add constraint tool_jobs_lease_within_a_day check (lease_until <= now() + interval '1 day') not valid,
    -- a heartbeat is within its lease (a heartbeat in the year 9000 would read healthy for ever); no
    -- check here reads now() against a time another transaction wrote (a long transaction of the
    -- control plane would meet a heartbeat committed after it began): the story guard below dates
    -- what a worker writes
    add constraint tool_jobs_heartbeat_within_lease check (heartbeat_at <= lease_until) not valid,
    add constraint tool_jobs_finished_after_made check (finished_at >= created_at) not valid,
    add constraint tool_jobs_terminal_reason_bounded check (length(terminal_reason) <= 2000) not valid;

alter table public.shutdowns
    add constraint shutdowns_window_bounded check (window_seconds > 0 and window_seconds <= 604800) not valid,
    add constraint shutdowns_requested_by_named check (requested_by ~ '[[:alnum:]]') not valid;

alter table public.tool_jobs
    add constraint tool_jobs_names_bounded
        check (length(owner_id) <= 200 and length(agent_id) <= 200 and length(session_id) <= 200
               and length(external_request_id) <= 500) not valid;

alter table public.grants
    add constraint grants_resource_bounded check (length(resource) <= 1000 and length(kind) <= 100) not valid;

alter table public.fleet_events
    add constraint fleet_events_details_bounded check (pg_column_size(details) <= 65536) not valid,
    add constraint fleet_events_actor_bounded check (length(actor) <= 200) not valid;

alter table public.job_events
    add constraint job_events_actor_bounded check (length(actor) <= 200) not valid,
    add constraint job_events_details_bounded check (pg_column_size(details) <= 65536) not valid,
    add constraint job_events_operator_named check (kind not like 'operator%' or actor ~ '[[:alnum:]]') not valid;

-- ---------------------------------------------------------------------------------------
-- The rules of a change that 0013's guard does not see, beside 0014's chain guard (it runs before
-- the state guard: the names sort).

create function public.leasectl_story_guard() returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
declare
    v_max integer;
begin
    if public.leasectl_is_exempt() then
        return new;
    end if;
    -- a worker's change is dated now, so it comes from a fresh read committed transaction (LCS12): one
    -- opened before a drain would date a finish, a start or a check before it
    if public.leasectl_stale_worker_transaction() then
        raise exception 'call % is changed from a read committed transaction of its own, not one begun at %',
            old.id, now() using errcode = 'LCS12';
    end if;
    if public.leasectl_binds_worker_identity() then
        -- a queued call belongs to nobody: a worker only claims it
        if old.state = 'queued' and new.state not in ('queued', 'running') then
            raise exception 'call % is queued: a worker only claims it', old.id using errcode = 'LCS10';
        end if;
        -- a call goes back to the queue from its owner's live lease (fail.sql), with an attempt left
        if new.state = 'queued' and old.state in ('running', 'cancel_requested')
           and not (public.leasectl_worker_id_bound(old.owner_id) and old.lease_until > now()
                    and old.attempt < (select t.max_attempts from public.tools t where t.name = old.tool)
                                      + old.extra_attempts) then
            raise exception 'call %: only its owner gives it back, while its lease is live and an attempt is left',
                old.id using errcode = 'LCS11';
        end if;
        -- a cancel is asked by an operator or the control plane, never by the worker of the call
        if new.state = 'cancel_requested' and old.state <> 'cancel_requested' then
            raise exception 'call %: a worker confirms a cancel, it does not ask for one', old.id using errcode = 'LCS11';
        end if;
        -- an error comes with the ending or the move it explains (fail.sql, report_outcome_unknown.sql);
        -- a success brings a result and nothing else; a result comes with a success only
        if new.error is distinct from old.error and (new.state = old.state or new.state = 'succeeded') then
            raise exception 'call %: an error is written with the state it explains', old.id using errcode = 'LCS11';
        end if;
        if new.result is distinct from old.result and new.state <> 'succeeded' then
            raise exception 'call %: a result comes with its success', old.id using errcode = 'LCS11';
        end if;
        if new.terminal_reason is distinct from old.terminal_reason
           and (new.state = 'succeeded' or new.terminal_reason ~* '^\W*marked\M') then
            raise exception 'call %: a worker''s ending says why in its own words, never an operator''s', old.id
                using errcode = 'LCS11';
        end if;
        -- a request id comes with a start (start_side_effect.sql), never alone
        if new.external_request_id is distinct from old.external_request_id
           and new.side_effect_started_at is not distinct from old.side_effect_started_at then
            raise exception 'call %: a request id comes with the start of its request', old.id using errcode = 'LCS07';
        end if;
        -- one start per transaction: a second one would share its time, and the journal dates starts
        if new.side_effect_started_at is distinct from old.side_effect_started_at and old.side_effect_started_at = now() then
            raise exception 'call %: one request starts per transaction', old.id using errcode = 'LCS07';
        end if;
        -- cancelled only after a cancel was asked; outcome unknown only after a request went out or a
        -- check could not tell
        if new.state = 'cancelled' and old.state <> 'cancel_requested' then
            raise exception 'call % was not asked to stop: a worker confirms a cancel, it does not invent one', old.id
                using errcode = 'LCS11';
        end if;
        if new.state = 'outcome_unknown' and old.state <> 'outcome_unknown' and old.side_effect_started_at is null
           and new.check_found is distinct from 'unknown' and old.external_request_id is null then
            raise exception 'call %: no request went out, so its outcome is not unknown', old.id using errcode = 'LCS11';
        end if;
    end if;
    -- a request starts now (a backdated start would make an older check count as after it)
    if new.side_effect_started_at is distinct from old.side_effect_started_at and new.side_effect_started_at is not null then
        new.side_effect_started_at := now();
    end if;
    -- a claim time changes with a claim only
    if new.claimed_at is distinct from old.claimed_at
       and not (new.state = 'running' and new.fencing_token = old.fencing_token + 1) then
        raise exception 'call %: its claim time changes only with a claim', old.id using errcode = 'LCS11';
    end if;
    -- a request starts on a running call that stays running, its owner's, under its token, with a
    -- live lease: never together with a requeue, a finish or a new owner
    if new.side_effect_started_at is not null and new.side_effect_started_at is distinct from old.side_effect_started_at
       and not (old.state = 'running' and new.state = 'running' and new.owner_id is not distinct from old.owner_id
                and new.fencing_token = old.fencing_token and old.lease_until > now()) then
        raise exception 'call %: a request starts on its owner''s running call, and nothing else changes with it',
            old.id using errcode = 'LCS07';
    end if;
    -- a requeue gives the call back and nothing else: no result, request, claim or heartbeat with it
    if new.state = 'queued' and old.state <> 'queued'
       and (new.result is distinct from old.result or new.external_request_id is distinct from old.external_request_id
            or new.heartbeat_at is distinct from old.heartbeat_at or new.claimed_at is distinct from old.claimed_at) then
        raise exception 'call %: a requeue gives the call back and writes nothing else of its story', old.id
            using errcode = 'LCS11';
    end if;
    -- a grant needs an attempt left (the claim asks the same)
    if new.state = 'running' and (old.state <> 'running' or new.fencing_token <> old.fencing_token) then
        select t.max_attempts into v_max from public.tools t where t.name = old.tool;
        if old.attempt >= v_max + old.extra_attempts then
            raise exception 'call % used its % attempts: only a human''s approved retry gives another', old.id,
                old.attempt using errcode = 'LCS11';
        end if;
    end if;
    -- the attempt counts claims, and nothing else moves it
    if new.attempt <> old.attempt
       and not (new.state = 'running' and new.fencing_token = old.fencing_token + 1 and new.attempt = old.attempt + 1) then
        raise exception 'the attempt of call % counts its claims: it changes only with one', old.id
            using errcode = 'LCS11';
    end if;
    -- a completion despite a cancel needs the cancel
    if new.completed_despite_cancel and not old.completed_despite_cancel
       and not (old.state = 'cancel_requested' and new.state = 'succeeded') then
        raise exception 'call % was not asked to stop: it cannot have completed despite a cancel', old.id
            using errcode = 'LCS11';
    end if;
    -- a reason comes with an ending, and "marked ... by" is an operator's
    if new.terminal_reason is distinct from old.terminal_reason then
        if new.state = old.state or new.terminal_reason like 'marked %' then
            raise exception 'call %: a terminal reason comes with its ending, in the words of whoever ended it', old.id
                using errcode = 'LCS11';
        end if;
    end if;
    -- an ending is dated now
    if new.state in ('succeeded', 'failed', 'cancelled') and new.state is distinct from old.state then
        new.finished_at := now();
    end if;
    return new;
end $$;

create trigger tool_jobs_story_guard
    before update of state, side_effect_started_at, attempt, completed_despite_cancel, terminal_reason,
                     fencing_token, finished_at, claimed_at, result, external_request_id, heartbeat_at, error
    on public.tool_jobs
    for each row
    execute function public.leasectl_story_guard();

-- ---------------------------------------------------------------------------------------
-- A worker's call names an agent of its own (registered by this login, or under one it registered).

create function public.leasectl_call_agent_guard() returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
declare
    v_owner text;
begin
    if new.agent_id is null or not public.leasectl_is_worker_login() then
        return new;
    end if;
    select a.owner_role into v_owner from public.agents a where a.id = new.agent_id;
    if v_owner is distinct from session_user::text and not public.leasectl_owns_an_ancestor(new.agent_id) then
        raise exception 'login % may not enqueue for agent %: it neither registered it nor an agent above it',
            session_user, new.agent_id using errcode = 'LCF08';
    end if;
    return new;
end $$;

create trigger tool_jobs_call_agent_guard
    before insert on public.tool_jobs
    for each row
    when (new.agent_id is not null)
    execute function public.leasectl_call_agent_guard();

-- ---------------------------------------------------------------------------------------
-- Enqueue locks nothing it did not create: a look first, then an insert that does nothing on a
-- conflict (it waits for a concurrent insert of the same key to end, then finds that call).

create or replace function public.leasectl_enqueue(p_tool text, p_idempotency_key text, p_payload jsonb,
                                                   p_agent_id text, p_session_id text, p_deadline_at timestamptz,
                                                   p_model text, p_provider text, p_parent_id uuid,
                                                   p_priority smallint, p_accepted_at timestamptz, p_trace_id text)
returns table (id uuid, state text, fencing_token bigint, tool text, payload_hash text, created boolean)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
#variable_conflict use_column
declare
    p record;
begin
    -- the same key twice is the first call; a next stage's key is that stage only under the same
    -- parent (another login's call that took the key first is not handed over as the next stage)
    return query select j.id, j.state, j.fencing_token, j.tool, j.payload_hash, false
                 from public.tool_jobs j
                 where j.idempotency_key = p_idempotency_key
                   and (p_parent_id is null or j.parent_id is not distinct from p_parent_id);
    if found or exists (select 1 from public.tool_jobs j where j.idempotency_key = p_idempotency_key) then
        return;
    end if;
    if p_parent_id is not null then
        select * into p from public.leasectl_chain_parent(p_parent_id);
        if not found or p.state not in ('running', 'succeeded') or public.leasectl_chain_cancelled(p.chain_id)
           or (public.leasectl_is_worker_login() and not public.leasectl_worker_id_bound(p.owner_id)) then
            return;
        end if;
    end if;
    if exists (select 1 from public.agents a where a.id = p_agent_id and a.state <> 'running') then
        return;
    end if;
    return query
    insert into public.tool_jobs as j (tool, idempotency_key, payload, agent_id, session_id,
                                       deadline_at, model, provider, parent_id, priority, accepted_at,
                                       trace_id)
    values (p_tool, p_idempotency_key, p_payload, p_agent_id, p_session_id, p_deadline_at, p_model,
            p_provider, p_parent_id, coalesce(p_priority, 0), coalesce(p_accepted_at, now()), p_trace_id)
    on conflict (idempotency_key) do nothing
    returning j.id, j.state, j.fencing_token, j.tool, j.payload_hash, true;
    if found then
        return;
    end if;
    -- a concurrent enqueue of the same key committed first: its call (under the same parent)
    return query select j.id, j.state, j.fencing_token, j.tool, j.payload_hash, false
                 from public.tool_jobs j
                 where j.idempotency_key = p_idempotency_key
                   and (p_parent_id is null or j.parent_id is not distinct from p_parent_id);
end $$;

create or replace function public.leasectl_enqueue(p_tool text, p_idempotency_key text, p_payload jsonb,
                                                   p_agent_id text, p_session_id text,
                                                   p_deadline_at timestamp with time zone, p_model text,
                                                   p_provider text)
returns table (id uuid, state text, fencing_token bigint, tool text, payload_hash text, created boolean)
language sql security definer set search_path = pg_catalog, public, pg_temp as $$
    select * from public.leasectl_enqueue(p_tool, p_idempotency_key, p_payload, p_agent_id, p_session_id,
                                          p_deadline_at, p_model, p_provider, null, null, null, null)
$$;

-- ---------------------------------------------------------------------------------------
-- A shutdown is refused from inside its subtree only to the login of an agent in it.

create or replace function public.leasectl_shutdowns_guard()
returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    if tg_op = 'INSERT' then
        if new.state <> 'requested' then
            raise exception 'a shutdown starts requested' using errcode = 'LCF02';
        end if;
        -- (0015) the agent named must also be the asking login's own: an operator's name that an
        -- agent took cannot block that operator's shutdowns
        if exists (select 1 from public.leasectl_subtree(new.root_agent_id) s
                   join public.agents a on a.id = s.agent_id
                   where s.agent_id = new.requested_by and a.owner_role = session_user::text) then
            raise exception 'agent % is inside the subtree of %: a shutdown is requested from outside',
                new.requested_by, new.root_agent_id using errcode = 'LCF01';
        end if;
        return new;
    end if;
    if old.state = 'terminated' and new is distinct from old then
        raise exception 'shutdown % is terminated and cannot change', old.id using errcode = 'LCF02';
    end if;
    if new.state <> old.state and not (
           (old.state = 'requested' and new.state in ('draining', 'aborting'))
        or (old.state = 'draining' and new.state in ('aborting', 'reconciling'))
        or (old.state = 'aborting' and new.state = 'reconciling')
        or (old.state = 'reconciling' and new.state = 'terminated')) then
        raise exception 'illegal shutdown transition % -> %', old.state, new.state using errcode = 'LCF02';
    end if;
    if new.state = 'terminated' and old.state <> 'terminated'
       and not exists (select 1 from public.reconciliation_records r where r.shutdown_id = new.id) then
        raise exception 'shutdown % cannot be terminated without its reconciliation record', new.id
            using errcode = 'LCF03';
    end if;
    if new.root_agent_id <> old.root_agent_id or new.mode <> old.mode
       or new.requested_by <> old.requested_by or new.requested_at <> old.requested_at then
        raise exception 'who asked, when and for which subtree never change' using errcode = 'LCF02';
    end if;
    return new;
end $$;

-- ---------------------------------------------------------------------------------------
-- The control plane ends a worker's or an operator's transaction that holds leasectl's tables for
-- longer than it allows (never less than 5 s). A reference worker's transaction is one statement,
-- and so is each of the console's actions; a session that sits on the fleet's rows is holding up
-- heartbeats, drains or cancels. Superusers', the control plane's and the auditor's sessions (the
-- auditor can lock nothing) are never touched. It needs its owner to read every session's activity and signal
-- backends (a superuser, or pg_read_all_stats and pg_signal_backend): without them it ends nothing
-- (`leasectl doctor` says so).

create function public.leasectl_end_lock_holders(p_older_than interval default '10 seconds')
returns table (pid integer, login text, held_for interval, ended boolean)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
#variable_conflict use_column
declare
    r record;
    v_ended boolean;
begin
    if not exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_worker')
       or not exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_operator') then
        return;
    end if;
    -- never less than a few seconds, whoever asks: one statement of a worker or an operator may
    -- legitimately wait for a lock that long
    p_older_than := greatest(p_older_than, interval '5 seconds');
    for r in
        select distinct a.pid, a.usename::text as login, now() - a.xact_start as held_for
        from pg_catalog.pg_stat_activity a
        join pg_catalog.pg_locks l on l.pid = a.pid and l.granted
        where a.datname = current_database()
          and a.pid <> pg_backend_pid()
          and a.xact_start < now() - p_older_than
          and (pg_catalog.pg_has_role(a.usesysid, 'leasectl_worker', 'member')
               or (pg_catalog.pg_has_role(a.usesysid, 'leasectl_operator', 'member')
                   and not pg_catalog.pg_has_role(a.usesysid, 'leasectl_supervisor', 'member')))
          and not (select rolsuper from pg_catalog.pg_roles where oid = a.usesysid)
          and l.locktype = 'relation'
          and l.relation in ('public.tool_jobs'::regclass, 'public.agents'::regclass,
                             'public.grants'::regclass, 'public.shutdowns'::regclass,
                             'public.job_events'::regclass)
    loop
        v_ended := pg_catalog.pg_terminate_backend(r.pid);
        insert into public.fleet_events (kind, actor, details)
        values ('session_ended', 'control-plane',
                jsonb_build_object('pid', r.pid, 'login', r.login, 'held_for_seconds',
                                   round(extract(epoch from r.held_for)::numeric, 1), 'ended', v_ended,
                                   'why', 'a worker login held leasectl''s tables in one transaction for longer than '
                                          || p_older_than));
        return query select r.pid, r.login, r.held_for, v_ended;
    end loop;
end $$;

revoke all on function public.leasectl_end_lock_holders(interval) from public;

do $$
declare
    v_owner text := public.leasectl_schema_owner();
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_supervisor') then
        grant execute on function public.leasectl_end_lock_holders(interval) to leasectl_supervisor;
    end if;
    -- it runs as the schema's owner; give the owner what it needs to see and end a session, where
    -- this migration may (a superuser owner needs nothing)
    if not (select rolsuper from pg_catalog.pg_roles where rolname = v_owner) then
        begin
            execute format('grant pg_read_all_stats, pg_signal_backend to %I', v_owner);
        exception
            when insufficient_privilege then
                raise notice 'leasectl: % may not grant pg_read_all_stats and pg_signal_backend to %: '
                             'leasectl_end_lock_holders will end no session (leasectl doctor)', current_user, v_owner;
        end;
    end if;
    if (select proowner from pg_catalog.pg_proc
        where oid = 'public.leasectl_end_lock_holders(interval)'::regprocedure)
       <> (select relowner from pg_catalog.pg_class where oid = 'public.job_events'::regclass) then
        begin
            execute format('alter function public.leasectl_end_lock_holders(interval) owner to %I', v_owner);
        exception
            when insufficient_privilege then
                raise notice 'leasectl: % may not give leasectl_end_lock_holders to %', current_user, v_owner;
        end;
    end if;
end $$;

insert into leasectl_migrations (version, name) values (15, '0015_trust_third_walk')
on conflict (version) do nothing;
