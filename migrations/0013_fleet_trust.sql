-- 0013: the trust boundary, second walk. A tester who had not read 0012 attacked a
-- migrated database with only worker, operator and auditor logins. The calls held; the fleet and
-- the edges of the journal did not. Each finding, and the rule that closes it for any SQL:
--
--   fleet_events forged      a worker or an operator inserted drains, refusals, revocations and
--                            state changes in anybody's name, dated as it liked. Nobody but the
--                            database writes fleet_events now: the journal trigger (SECURITY
--                            DEFINER) and the operator's shutdown statement, now a SECURITY
--                            DEFINER function like the call actions (leasectl_request_shutdown).
--                            A login's insert is refused (LCF06), rows are dated by the database.
--   agents confirmed by anyone  a worker set terminated_confirmed_at (and last_seen_at) on any
--                            agent, even backdated: the reconciliation record then listed silent
--                            agents as confirmed. Row level security on agents: a worker login
--                            writes only the agents it registered (owner_role); a confirmation is
--                            made once, now, while its subtree shuts down; last_seen_at is now().
--   work for a draining tree a child registered by plain INSERT under a draining or terminated
--                            parent got calls and claimed them; a claim made from a snapshot
--                            older than the drain (REPEATABLE READ) took a draining agent's call;
--                            grants were issued to draining agents. Agents, calls and grants are
--                            refused under an agent that is not running (LCF07), the agent's row
--                            share-locked so a stale snapshot fails to serialize instead.
--   grants forged            a grant inserted already revoked "by the control plane", issued in
--                            the control plane's or any ancestor's name, or revoked with a
--                            backdated time. A grant is issued unrevoked, in a name this login
--                            may speak for (as revocation, 0012), and revoked now (LCF04).
--   an agent id squatted     a worker registered `planner-2` before the control plane did; the
--                            control plane's register.sql then returned the worker's row and
--                            built its tree under it. register.sql answers zero rows for an id
--                            another login registered (queries/agent/register.sql).
--   one UPDATE blinds audit  a claim co-wrote an infinite lease, attempt 0, a result, a finish
--                            time and a request start dated before the call; a token jumped to
--                            the top of bigint and every later claim overflowed. A claim now
--                            changes owner, token (+1), lease and attempt (+1) and nothing else;
--                            attempt changes with nothing else; an unfinished call has no finish
--                            time (LCS11); no time of a call, agent or grant is infinite (checks).
--   history backdated        a claim is dated at its transaction's start (now(), the clock every
--                            rule compares with), so a transaction held open could date a claim
--                            before the enqueue or inside another owner's lease. A worker's claim
--                            must come from a transaction no older than its statement by more than
--                            2 seconds (LCS12); every worker statement is a transaction of its own.
--   ids pre-occupied         `overriding system value` inserted job_events ids ahead of the
--                            sequence: every later journaled write failed. Logins insert the
--                            columns of a report only (column privileges), never an id.
--   reports that pose        a worker report with a reason or a lease, or of a kind spelled like
--                            an operator's (operatorapprove_retry), is refused (LCH02, LCH03);
--                            an operator decision with an empty name is refused (22023); a worker
--                            login cannot name the actor of its fleet events (leasectl.actor).
--
-- New SQLSTATEs: LCS11 a claim or an update that writes more than its transition may;
--                LCS12 a worker's claim from a transaction that began long before it.
--
-- Runnable with `psql -v ON_ERROR_STOP=1 -f` and by `leasectl migrate`. Every function follows
-- 0012's rule (search_path = pg_catalog, public, pg_temp; every name schema-qualified).

-- ---------------------------------------------------------------------------------------
-- No infinite time: an infinite lease or last-seen made every age on screen, the history and
-- `audit verify` fail ("cannot subtract infinite timestamps"). NOT VALID: history is kept as it is.
alter table public.tool_jobs
    add constraint tool_jobs_finite_times check (
        isfinite(created_at) and isfinite(lease_until) and isfinite(heartbeat_at) and isfinite(claimed_at)
        and isfinite(finished_at) and isfinite(deadline_at) and isfinite(cancel_requested_at)
        and isfinite(side_effect_started_at) and isfinite(retry_approved_at)) not valid;
alter table public.agents
    add constraint agents_finite_times check (
        isfinite(started_at) and isfinite(last_seen_at) and isfinite(terminated_confirmed_at)) not valid;
alter table public.grants
    add constraint grants_finite_times check (
        isfinite(issued_at) and isfinite(expires_at) and isfinite(revoked_at)) not valid;

-- ---------------------------------------------------------------------------------------
-- An agent's state, read past the agents' row level security (below) and share-locked when asked:
-- the guards of tool_jobs, agents and grants call it as the session's own role, which may not see
-- or lock another login's agent. SECURITY DEFINER, executable by the roles that insert and claim.
create function public.leasectl_agent_state(p_agent text, p_lock boolean) returns text
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    v_state text;
begin
    if p_lock then
        select a.state into v_state from public.agents a where a.id = p_agent for share;
    else
        select a.state into v_state from public.agents a where a.id = p_agent;
    end if;
    return v_state;
end $$;

revoke all on function public.leasectl_agent_state(text, boolean) from public;

-- Does this session's login own an ancestor of the agent (the grants it may revoke, 0012)?
create function public.leasectl_owns_an_ancestor(p_agent text) returns boolean
language sql stable set search_path = pg_catalog, public, pg_temp as $$
    with recursive up as (
        select a.parent_id from public.agents a where a.id = p_agent
        union all
        select a.parent_id from public.agents a join up on a.id = up.parent_id where up.parent_id is not null
    )
    select exists (select 1 from up join public.agents o on o.id = up.parent_id
                   where o.owner_role = session_user)
$$;

-- ---------------------------------------------------------------------------------------
-- Agents. One guard for every new agent (it replaces 0012's agents_owner_stamp): registered by
-- the login that inserts it (the control plane may register one for a login), running, seen and
-- started now, never confirmed at birth, and only under a parent that is running -- share-locked,
-- as a call's agent is: a drain that starts at this moment either sees the child or refuses it.
-- A session exempt from the journal rules (the schema owner, a superuser) is trusted with what it
-- writes, as everywhere (it can disable any trigger).
drop trigger agents_owner_stamp on public.agents;
drop function public.leasectl_agents_owner_stamp();

create function public.leasectl_agents_insert_guard() returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
declare
    v_parent text;
begin
    if new.owner_role is null or not public.leasectl_is_control_plane() then
        new.owner_role := session_user;
    end if;
    if public.leasectl_is_exempt() then
        return new;
    end if;
    if new.state <> 'running' or new.terminated_confirmed_at is not null then
        raise exception 'agent % starts running and unconfirmed, not % (a shutdown moves it on)', new.id, new.state
            using errcode = 'LCF05';
    end if;
    new.started_at := now();
    new.last_seen_at := now();
    if new.parent_id is not null then
        v_parent := public.leasectl_agent_state(new.parent_id, true);
        if v_parent <> 'running' then
            raise exception 'agent % is %: no new child under it', new.parent_id, v_parent using errcode = 'LCF07';
        end if;
    end if;
    return new;
end $$;

create trigger agents_insert_guard
    before insert on public.agents
    for each row execute function public.leasectl_agents_insert_guard();

-- What an agent says of itself: it is alive (now, whatever time the client sent), and, once its
-- subtree shuts down, that it stopped -- once, now. Nobody backdates a confirmation to before the
-- shutdown, or confirms an agent that is not shutting down.
create function public.leasectl_agents_seen_guard() returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    if public.leasectl_is_exempt() then
        return new;
    end if;
    if new.last_seen_at is distinct from old.last_seen_at then
        new.last_seen_at := now();
    end if;
    if new.terminated_confirmed_at is distinct from old.terminated_confirmed_at then
        if old.terminated_confirmed_at is not null then
            raise exception 'agent % confirmed it stopped at %: a confirmation is not taken back or moved',
                old.id, old.terminated_confirmed_at using errcode = 'LCF05';
        end if;
        if new.state not in ('draining', 'aborting', 'reconciling') then
            raise exception 'agent % is %: only an agent whose subtree is shutting down confirms it stopped',
                old.id, new.state using errcode = 'LCF05';
        end if;
        new.terminated_confirmed_at := now();
    end if;
    return new;
end $$;

create trigger agents_seen_guard
    before update of last_seen_at, terminated_confirmed_at on public.agents
    for each row execute function public.leasectl_agents_seen_guard();

-- Row level security: every login reads every agent; a worker login writes (heartbeat, confirm)
-- only the agents it registered; the control plane writes any. Owner and superusers bypass it.
alter table public.agents enable row level security;
create policy agents_read on public.agents for select using (true);
create policy agents_insert on public.agents for insert with check (true);

-- ---------------------------------------------------------------------------------------
-- Grants. Issued unrevoked, to a running agent, in the name of the control plane or of an ancestor
-- this login may speak for (0012's rule for revocation: leasectl_may_revoke), dated now.
create function public.leasectl_grants_insert_guard() returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
declare
    v_state text;
begin
    if public.leasectl_is_exempt() then
        return new;
    end if;
    if new.revoked_at is not null or new.revoked_by is not null then
        raise exception 'a grant is issued unrevoked: revocation is its own step (supervisor/revoke_grant.sql)'
            using errcode = 'LCF04';
    end if;
    if not public.leasectl_may_revoke(new.agent_id, new.issued_by) then
        raise exception 'login % may not issue a grant to % in the name of %', session_user, new.agent_id,
            coalesce(new.issued_by, '(nobody)')
            using errcode = 'LCF04',
                  hint = 'grants are issued by the control plane, or in the name of an ancestor of the holder '
                         || 'registered by this login';
    end if;
    v_state := public.leasectl_agent_state(new.agent_id, true);
    if v_state <> 'running' then
        raise exception 'agent % is %: it gets no new grant', new.agent_id, v_state using errcode = 'LCF07';
    end if;
    new.issued_at := now();
    return new;
end $$;

create trigger grants_insert_guard
    before insert on public.grants
    for each row execute function public.leasectl_grants_insert_guard();

alter table public.grants enable row level security;
create policy grants_read on public.grants for select using (true);
create policy grants_insert on public.grants for insert with check (true);

do $$
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_worker') then
        create policy agents_worker_update on public.agents for update to leasectl_worker
            using (owner_role = session_user) with check (owner_role = session_user);
        create policy grants_worker_update on public.grants for update to leasectl_worker
            using (public.leasectl_owns_an_ancestor(agent_id)) with check (true);
        grant execute on function public.leasectl_agent_state(text, boolean) to leasectl_worker;
    end if;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_supervisor') then
        create policy agents_supervisor_update on public.agents for update to leasectl_supervisor
            using (true) with check (true);
        create policy grants_supervisor_update on public.grants for update to leasectl_supervisor
            using (true) with check (true);
    end if;
end $$;

-- ---------------------------------------------------------------------------------------
-- No login chooses a journal id: a login that wrote ids ahead of the sequence made every later
-- journaled write fail. Workers and the control plane insert the columns of a report, nothing more.

do $$
declare
    r text;
begin
    foreach r in array array['leasectl_worker', 'leasectl_supervisor'] loop
        continue when not exists (select 1 from pg_catalog.pg_roles where rolname = r);
        execute format('revoke insert on public.job_events from %I', r);
        execute format('grant insert (job_id, kind, actor, fencing_token, details) on public.job_events to %I', r);
    end loop;
    -- nobody but the database writes the fleet's journal: the journal trigger and the operator's
    -- shutdown statement (both SECURITY DEFINER), no login
    foreach r in array array['leasectl_worker', 'leasectl_operator', 'leasectl_supervisor'] loop
        continue when not exists (select 1 from pg_catalog.pg_roles where rolname = r);
        execute format('revoke insert on public.fleet_events from %I', r);
    end loop;
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_operator') then
        revoke insert on public.shutdowns from leasectl_operator;
    end if;
end $$;

-- fleet_events: 0005's stamp becomes a guard. A row the schema's own code writes (as the owner,
-- with the defaults) skips it; any other is refused unless the session is exempt (the owner or a
-- superuser, which can disable the trigger anyway), and its login and time are the database's.
drop trigger fleet_events_stamp on public.fleet_events;
drop function public.leasectl_fleet_events_stamp();

create function public.leasectl_fleet_events_guard() returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    if current_user <> public.leasectl_schema_owner() and not public.leasectl_is_exempt() then
        raise exception 'fleet_events is written by the database itself (the fleet journal, the operator''s shutdown statement)'
            using errcode = 'LCF06';
    end if;
    new.db_role := session_user;
    new.at := now();
    return new;
end $$;

do $$
begin
    execute format($f$
        create trigger fleet_events_guard
            before insert on public.fleet_events
            for each row
            when (current_user <> %L::name
                  or new.db_role is distinct from session_user
                  or new.at is distinct from now())
            execute function public.leasectl_fleet_events_guard()
    $f$, public.leasectl_schema_owner());
end $$;


-- ---------------------------------------------------------------------------------------
-- The operator's shutdown request, as a SECURITY DEFINER function like the call actions (0005):
-- the request, or the journaled refusal, in one statement; the operator has no INSERT of its own
-- on shutdowns or fleet_events. The rules are queries/operator/request_shutdown.sql's, moved here.
create function public.leasectl_request_shutdown(p_root_agent_id text, p_mode text, p_requested_by text,
                                                 p_reason text, p_window_seconds numeric)
returns table (id uuid, root_agent_id text, mode text, state text, requested_by text, reason text,
               requested_at timestamptz, window_seconds numeric)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
#variable_conflict use_column
declare
    v_agent      public.agents;
    v_overlap    record;
    v_request_id uuid := nullif(current_setting('leasectl.request_id', true), '')::uuid;
begin
    if coalesce(btrim(p_requested_by), '') = '' then
        raise exception 'an operator name is required: it is journaled with the request' using errcode = '22023';
    end if;
    select * into v_agent from public.agents a where a.id = p_root_agent_id;
    if not found then
        return;  -- no such agent: nothing to journal
    end if;
    -- a shutdown already under way whose subtree meets this one
    select s.id, s.root_agent_id into v_overlap
    from public.shutdowns s
    where s.state <> 'terminated'
      and (s.root_agent_id in (select t.agent_id from public.leasectl_subtree(p_root_agent_id) t)
           or public.leasectl_is_ancestor(s.root_agent_id, p_root_agent_id))
    limit 1;
    if v_agent.state = 'running' and v_overlap.id is null then
        return query
        insert into public.shutdowns as s (root_agent_id, mode, requested_by, reason, window_seconds)
        values (v_agent.id, p_mode, p_requested_by, p_reason, p_window_seconds)
        on conflict do nothing
        returning s.id, s.root_agent_id, s.mode, s.state, s.requested_by, s.reason, s.requested_at,
                  s.window_seconds;
        if found then
            return;
        end if;
    end if;
    insert into public.fleet_events (kind, actor, agent_id, reason, request_id, details)
    values ('shutdown_refused', p_requested_by, p_root_agent_id, p_reason, v_request_id,
            jsonb_strip_nulls(jsonb_build_object(
                'mode', p_mode,
                'agent_state', v_agent.state,
                'shutdown_under_way', v_overlap.id,
                'refusal', case
                    when v_agent.state <> 'running' then 'agent ' || v_agent.id || ' is ' || v_agent.state
                    when v_overlap.id is not null
                        then 'a shutdown of ' || v_overlap.root_agent_id || ' is already under way'
                    else 'a shutdown of ' || v_agent.id || ' was requested at the same moment' end)));
end $$;

revoke all on function public.leasectl_request_shutdown(text, text, text, text, numeric) from public;
do $$
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_operator') then
        grant execute on function public.leasectl_request_shutdown(text, text, text, text, numeric)
            to leasectl_operator;
    end if;
    -- it runs as the role the guards recognise (the tables' owner), as 0005's operator functions do
    if (select proowner from pg_catalog.pg_proc
        where oid = 'public.leasectl_request_shutdown(text, text, text, text, numeric)'::regprocedure)
       <> (select relowner from pg_catalog.pg_class where oid = 'public.job_events'::regclass) then
        begin
            execute format('alter function public.leasectl_request_shutdown(text, text, text, text, numeric) owner to %I',
                           public.leasectl_schema_owner());
        exception
            when insufficient_privilege then
                raise notice 'leasectl: % may not give leasectl_request_shutdown to %', current_user,
                    public.leasectl_schema_owner();
        end;
    end if;
end $$;

-- ---------------------------------------------------------------------------------------
-- The guards and journals of 0012 with what 0013 adds (marked 0013).

create or replace function public.leasectl_tool_jobs_guard()
returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
declare
    v_side_effect text;
    v_agent_state text;
begin
    if tg_op = 'INSERT' then
        if new.state <> 'queued' then
            raise exception 'a new call must start queued, not %', new.state using errcode = 'LCS01';
        end if;
        if new.owner_id is not null or new.fencing_token <> 0 or new.attempt <> 0 then
            raise exception 'a new call has no owner, token 0 and no attempts' using errcode = 'LCS01';
        end if;
        -- (0012) a draining, aborting, reconciling or terminated agent gets no new call, whatever
        -- SQL inserts it. The agent's row is share-locked, as leasectl_enqueue does: a shutdown
        -- that starts at this moment either sees this call (and cancels it) or refuses it here.
        if new.agent_id is not null then
            -- (0013) read past the agents' row level security, and locked: see leasectl_agent_state
            v_agent_state := public.leasectl_agent_state(new.agent_id, true);
            if v_agent_state <> 'running' then
                raise exception 'agent % is %: it gets no new call', new.agent_id, v_agent_state
                    using errcode = 'LCF07';
            end if;
        end if;
        -- (0013) a worker's call queues from when it was made: a chosen created_at would jump the
        -- queue (the claim takes the oldest first)
        if public.leasectl_binds_worker_identity() then
            new.created_at := now();
        end if;
        new.payload_hash := encode(sha256(convert_to(new.payload::text, 'UTF8')), 'hex');
        return new;
    end if;

    -- (0012) ... and none of its calls is claimed or reclaimed (worker/claim.sql skips them; this
    -- refuses a claim written by hand). A claim that committed before the shutdown began is an
    -- in-flight call like any other: the shutdown finishes or cancels it and records it.
    if new.state = 'running' and new.agent_id is not null
       and (old.state <> 'running' or new.fencing_token <> old.fencing_token) then
        -- (0013) share-locked: a claim made from a snapshot older than the shutdown (REPEATABLE
        -- READ) fails to serialize instead of taking the call of an agent that is draining now
        v_agent_state := public.leasectl_agent_state(new.agent_id, true);
        if v_agent_state <> 'running' then
            raise exception 'agent % is %: it takes no call (call %)', new.agent_id, v_agent_state, old.id
                using errcode = 'LCF07';
        end if;
    end if;

    -- (0009) the two transitions every call makes, accepted in one expression each when
    -- they are exactly what the rules below accept unchanged.
    -- A claim: queued -> running, a new owner that is this login's own (or a session the
    -- identity rule does not bind), a higher token, nothing immutable touched. The rules below
    -- would pass it through LCS10 (not queued -> queued), LCS03, LCS05, LCS02, LCS01 (a legal
    -- transition), LCS08 (bound or not binding), the grant rules (an owner, a higher token, no
    -- live lease and no started side effect to look at: it was queued) and return it as it is.
    -- (0013) ... and only what a claim writes: the token and the attempt up by one, nothing else
    -- of the call's story (its result, error, finish, terminal reason, request start, cancel)
    if old.state = 'queued' and new.state = 'running'
       and new.owner_id is not null and new.fencing_token = old.fencing_token + 1
       and new.attempt = old.attempt + 1 and new.finished_at is null
       and new.id = old.id and new.idempotency_key = old.idempotency_key and new.tool = old.tool
       and new.payload is not distinct from old.payload and new.created_at = old.created_at
       and new.result is not distinct from old.result and new.error is not distinct from old.error
       and new.terminal_reason is not distinct from old.terminal_reason
       and new.side_effect_started_at is not distinct from old.side_effect_started_at
       and new.external_request_id is not distinct from old.external_request_id
       and new.cancel_requested_at is not distinct from old.cancel_requested_at
       and statement_timestamp() <= now() + interval '2 seconds'
       and (public.leasectl_worker_id_bound(new.owner_id) or not public.leasectl_binds_worker_identity()) then
        new.claimed_at := now();
        return new;
    end if;
    -- A completion by its owner: running -> succeeded, same owner, same token, nothing immutable
    -- touched. The rules below would only stamp finished_at (a running call is not
    -- cancel_requested, so completed_despite_cancel stays as it is).
    if old.state = 'running' and new.state = 'succeeded'
       and new.owner_id is not distinct from old.owner_id and new.fencing_token = old.fencing_token
       and new.id = old.id and new.idempotency_key = old.idempotency_key and new.tool = old.tool
       and new.payload is not distinct from old.payload and new.created_at = old.created_at then
        new.finished_at := coalesce(new.finished_at, now());
        return new;
    end if;

    -- an upsert that found an existing key touches the row without changing it
    if new is not distinct from old then
        return new;
    end if;

    -- (0005) a queued call belongs to nobody, so RLS has to let every worker claim it; what must not
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

    -- (0005) a worker login takes ownership only under its own identity. RLS would refuse it too
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
            select side_effect into v_side_effect from public.tools where name = old.tool;
            if v_side_effect = 'mutating_unverifiable' then
                raise exception 'call % started an unverifiable side effect; only a human may retry it',
                    old.id using errcode = 'LCS07';
            end if;
        end if;
        -- (0013) a grant is dated by its transaction's start (now(), the clock of every rule and of
        -- the journal): a worker's claim from a transaction held open would be dated before what
        -- happened since (another owner's stretch, even the call's enqueue)
        if statement_timestamp() > now() + interval '2 seconds' and public.leasectl_binds_worker_identity() then
            raise exception 'claim of call % from a transaction that began at %: a claim is a transaction of its own',
                old.id, now() using errcode = 'LCS12';
        end if;
        -- (0013) a grant changes ownership and nothing else: its attempt counts up by one, it is
        -- dated now, and it brings no result, error, finish time, terminal reason, request start
        -- or cancel with it
        if new.attempt <> old.attempt + 1
           or new.result is distinct from old.result or new.error is distinct from old.error
           or new.finished_at is not null or new.terminal_reason is distinct from old.terminal_reason
           or new.side_effect_started_at is distinct from old.side_effect_started_at
           or new.external_request_id is distinct from old.external_request_id
           or new.cancel_requested_at is distinct from old.cancel_requested_at then
            raise exception 'a claim of call % changes its owner, token, lease and attempt (by one), nothing else',
                old.id using errcode = 'LCS11';
        end if;
        new.claimed_at := now();
    elsif new.owner_id is distinct from old.owner_id and new.owner_id is not null then
        raise exception 'ownership of call % can only be granted by a claim', old.id
            using errcode = 'LCS01';
    end if;

    -- (0005) the same rule on the other road back to a worker. Requeueing an unverifiable call
    -- whose request may have run means the next claim runs it again (a second payment) with no
    -- human asked: worker/fail.sql and the sweep send it to outcome_unknown instead.
    if new.state = 'queued' and old.state in ('running', 'cancel_requested')
       and old.side_effect_started_at is not null then
        select side_effect into v_side_effect from public.tools where name = old.tool;
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

    -- (0005) outcome_unknown is left only by a human decision that is on the record. The operator
    -- functions write their journal row (outcome applied) *before* the update, in the same
    -- transaction, so the row is there when this runs; a direct UPDATE has none. The row is
    -- matched on the call's fencing token: a call is in outcome_unknown at most once per token
    -- (leaving it goes to a terminal state, or to queued, from where only a claim -- a new
    -- token -- leads back), so an old approval can never be replayed.
    if old.state = 'outcome_unknown' and new.state <> 'outcome_unknown' then
        if not exists (select 1 from public.job_events e
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

    -- (0013) a grant or a fence raises the token by exactly one: a token at the top of bigint
    -- would overflow every later claim. The attempt counts claims and changes with nothing else
    -- (a reset would undo max_attempts). An unfinished call has no finish time.
    if new.fencing_token > old.fencing_token + 1 then
        raise exception 'fencing token of call % rises by one per grant or fence, not % -> %',
            old.id, old.fencing_token, new.fencing_token using errcode = 'LCS02';
    end if;
    if new.attempt <> old.attempt and not (new.state = 'running' and new.fencing_token = old.fencing_token + 1) then
        raise exception 'the attempt of call % counts its claims: it changes only with one', old.id
            using errcode = 'LCS11';
    end if;
    if new.finished_at is not null and new.state not in ('succeeded', 'failed', 'cancelled') then
        raise exception 'call % is %: an unfinished call has no finish time', old.id, new.state
            using errcode = 'LCS11';
    end if;

    if old.state = 'cancel_requested' and new.state = 'succeeded' then
        new.completed_despite_cancel := true;
    end if;
    if new.state in ('succeeded', 'failed', 'cancelled') then
        new.finished_at := coalesce(new.finished_at, now());
    end if;
    return new;
end $$;

create or replace function public.leasectl_tool_jobs_journal()
returns trigger
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
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
        -- (0009) an enqueue is not notable: the console's poll shows it
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
        -- (0009) NOTIFY only what a human should see at once (the header of this file)
        if v_named is not null
           or v_kind in ('reclaimed', 'fenced')
           or new.state in ('outcome_unknown', 'failed', 'cancel_requested', 'cancelled')
           or old.state in ('cancel_requested', 'outcome_unknown') then
            perform pg_notify('leasectl_jobs',
                              json_build_object('id', new.id, 'state', new.state,
                                                'fencing_token', new.fencing_token)::text);
        end if;
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

create or replace function public.leasectl_job_events_kind_guard()
returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
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

create or replace function public.leasectl_grants_guard()
returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    if old.revoked_at is not null and new is distinct from old then
        raise exception 'grant % was revoked by % and cannot change', old.id, old.revoked_by
            using errcode = 'LCF04';
    end if;
    if new.revoked_at is not null and old.revoked_at is null then
        -- (0012) decided from the session's login, not from the name the client wrote: revoked_by
        -- is recorded, and must name the control plane or an ancestor this login may speak for
        if not public.leasectl_may_revoke(old.agent_id, new.revoked_by) then
            raise exception 'login % may not revoke grant % of % as %', session_user, old.id, old.agent_id,
                coalesce(new.revoked_by, '(nobody)')
                using errcode = 'LCF04',
                      hint = 'only the control plane (leasectl_supervisor), or the login that registered an '
                             || 'ancestor of ' || old.agent_id || ' in its own name, may revoke its grants';
        end if;
        -- (0013) revoked now, not at a time the client chose: a backdated revocation would fall
        -- outside the shutdown's record
        if not public.leasectl_is_exempt() then
            new.revoked_at := now();
        end if;
    end if;
    if new.agent_id <> old.agent_id or new.kind <> old.kind or new.resource <> old.resource
       or new.issued_by <> old.issued_by or new.issued_at <> old.issued_at then
        raise exception 'a grant is revoked or left alone, never rewritten' using errcode = 'LCF04';
    end if;
    return new;
end $$;

create or replace function public.leasectl_fleet_journal()
returns trigger
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    v_actor text := coalesce(nullif(current_setting('leasectl.actor', true), ''), session_user);
begin
    -- (0013) a worker login's session speaks only for itself: leasectl.actor is the operators' and
    -- the control plane's way to name who acted (as in leasectl_tool_jobs_journal)
    if public.leasectl_is_worker_login() then
        v_actor := session_user;
    end if;
    if tg_table_name = 'agents' then
        insert into public.fleet_events (kind, actor, agent_id, details)
        values (case when tg_op = 'INSERT' then 'agent_registered' else 'agent_state_changed' end, v_actor, new.id,
                jsonb_strip_nulls(jsonb_build_object('state_from', case when tg_op = 'UPDATE' then old.state end,
                                                     'state_to', new.state, 'parent_id', new.parent_id)));
    elsif tg_table_name = 'shutdowns' then
        insert into public.fleet_events (kind, actor, agent_id, shutdown_id, reason, request_id, details)
        values (case when tg_op = 'INSERT' then 'shutdown_requested' else 'shutdown_state_changed' end,
                case when tg_op = 'INSERT' then new.requested_by else v_actor end, new.root_agent_id, new.id,
                case when tg_op = 'INSERT' then new.reason end,
                case when tg_op = 'INSERT' then nullif(current_setting('leasectl.request_id', true), '')::uuid end,
                jsonb_strip_nulls(jsonb_build_object('mode', new.mode, 'window_seconds', new.window_seconds,
                                                     'state_from', case when tg_op = 'UPDATE' then old.state end,
                                                     'state_to', new.state)));
    elsif tg_table_name = 'grants' then
        insert into public.fleet_events (kind, actor, agent_id, grant_id, details)
        values (case when tg_op = 'INSERT' then 'grant_issued' else 'grant_revoked' end,
                case when tg_op = 'INSERT' then new.issued_by else new.revoked_by end, new.agent_id, new.id,
                jsonb_build_object('kind', new.kind, 'resource', new.resource));
    end if;
    -- wakes the supervisor (a new shutdown) and the console's fleet screens
    perform pg_notify('leasectl_fleet', json_build_object('table', tg_table_name, 'op', tg_op)::text);
    return null;
end $$;

-- ---------------------------------------------------------------------------------------
-- The state guard now also judges a change of attempt or finish time alone (LCS11): neither is
-- written by a heartbeat (lease_until, heartbeat_at), which still fires no trigger at all.
drop trigger tool_jobs_guard_update on public.tool_jobs;
create trigger tool_jobs_guard_update
    before update of state, owner_id, fencing_token, idempotency_key, tool, id, created_at,
                     retry_approved_by, payload, attempt, finished_at
    on public.tool_jobs
    for each row
    execute function public.leasectl_tool_jobs_guard();

insert into leasectl_migrations (version, name) values (13, '0013_fleet_trust')
on conflict (version) do nothing;
