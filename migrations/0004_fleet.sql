-- 0004: fleets and shutdowns (seed 003). An agent is a node in a delegation tree; killing the
-- root stops nothing below it. A shutdown drains or aborts a subtree, revocation flows down the
-- delegation chain, and a reconciliation record -- written from outside, by the control plane --
-- says what happened to every call, every grant and every child before anything is terminated.

create table agents (
    id                       text primary key,
    parent_id                text references agents (id),
    kind                     text not null,
    state                    text not null default 'running'
        check (state in ('running', 'draining', 'aborting', 'reconciling', 'terminated')),
    started_at               timestamptz not null default now(),
    last_seen_at             timestamptz,
    terminated_confirmed_at  timestamptz,
    check (parent_id is distinct from id)
);
create index agents_parent_idx on agents (parent_id);

create table grants (
    id          uuid primary key default gen_random_uuid(),
    agent_id    text not null references agents (id),
    kind        text not null check (kind in ('credential', 'file_lock', 'queue_reservation', 'rate_limit_token')),
    resource    text not null,
    issued_by   text not null,
    issued_at   timestamptz not null default now(),
    expires_at  timestamptz not null,
    revoked_at  timestamptz,
    revoked_by  text,
    check ((revoked_at is null) = (revoked_by is null))
);
create index grants_live_idx on grants (agent_id) where revoked_at is null;

-- a shutdown asks "what of this subtree is still live?" without reading the agents' history
create index tool_jobs_agent_live_idx on tool_jobs (agent_id)
    where agent_id is not null and state in ('queued', 'running', 'cancel_requested');

create table shutdowns (
    id              uuid primary key default gen_random_uuid(),
    root_agent_id   text not null references agents (id),
    mode            text not null check (mode in ('drain', 'abort')),
    state           text not null default 'requested'
        check (state in ('requested', 'draining', 'aborting', 'reconciling', 'terminated')),
    requested_by    text not null,
    reason          text not null check (length(trim(reason)) > 0),
    requested_at    timestamptz not null default now(),
    window_seconds  numeric not null check (window_seconds > 0),
    draining_at     timestamptz,
    aborting_at     timestamptz,
    reconciling_at  timestamptz,
    finished_at     timestamptz
);
-- one shutdown at a time per subtree root
create unique index shutdowns_active_root_idx on shutdowns (root_agent_id) where state <> 'terminated';

create table reconciliation_records (
    id                    uuid primary key default gen_random_uuid(),
    shutdown_id           uuid not null unique references shutdowns (id),  -- two supervisors: one record
    written_by            text not null,
    written_at            timestamptz not null default now(),
    in_flight             jsonb not null default '[]'::jsonb,   -- [{job_id, tool, resolution}]
    grants_revoked        jsonb not null default '[]'::jsonb,
    grants_expired        jsonb not null default '[]'::jsonb,
    children_confirmed    jsonb not null default '[]'::jsonb,
    children_unaccounted  jsonb not null default '[]'::jsonb    -- the most important field
);

-- what operators and the control plane did to the fleet (tool calls have job_events)
create table fleet_events (
    id           bigint generated always as identity primary key,
    at           timestamptz not null default now(),
    kind         text not null,
    actor        text,
    agent_id     text,
    shutdown_id  uuid,
    grant_id     uuid,
    reason       text,
    request_id   uuid,   -- an operator's request: ties a refusal to the attempt that got it
    details      jsonb not null default '{}'::jsonb
);
create index fleet_events_shutdown_idx on fleet_events (shutdown_id, id);
create index fleet_events_at_idx on fleet_events using brin (at);

-- the subtree rooted at an agent, root included, with depth
create function leasectl_subtree(p_root text)
returns table (agent_id text, depth integer)
language sql stable as $$
    with recursive tree as (
        select id, 0 as depth from agents where id = p_root
        union all
        select a.id, t.depth + 1 from agents a join tree t on a.parent_id = t.id
    )
    select id, depth from tree
$$;

create function leasectl_is_ancestor(p_candidate text, p_agent text)
returns boolean
language sql stable as $$
    with recursive up as (
        select parent_id from agents where id = p_agent
        union all
        select a.parent_id from agents a join up on a.id = up.parent_id where up.parent_id is not null
    )
    select exists (select 1 from up where parent_id = p_candidate)
$$;

-- ---------------------------------------------------------------------------------------
-- Refusals, whatever SQL a client sends (SQLSTATE class LCF):
--   LCF01 a shutdown requested by an agent inside the subtree   LCF02 illegal shutdown transition
--   LCF03 terminated without its reconciliation record           LCF04 revocation without authority
--   LCF05 illegal agent transition                               LCF06 history is append-only
create function leasectl_shutdowns_guard() returns trigger
language plpgsql set search_path = pg_catalog, public as $$
begin
    if tg_op = 'INSERT' then
        if new.state <> 'requested' then
            raise exception 'a shutdown starts requested' using errcode = 'LCF02';
        end if;
        if exists (select 1 from leasectl_subtree(new.root_agent_id) s where s.agent_id = new.requested_by) then
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
       and not exists (select 1 from reconciliation_records r where r.shutdown_id = new.id) then
        raise exception 'shutdown % cannot be terminated without its reconciliation record', new.id
            using errcode = 'LCF03';
    end if;
    if new.root_agent_id <> old.root_agent_id or new.mode <> old.mode
       or new.requested_by <> old.requested_by or new.requested_at <> old.requested_at then
        raise exception 'who asked, when and for which subtree never change' using errcode = 'LCF02';
    end if;
    return new;
end $$;

create trigger shutdowns_guard
    before insert or update on shutdowns
    for each row execute function leasectl_shutdowns_guard();

create function leasectl_grants_guard() returns trigger
language plpgsql set search_path = pg_catalog, public as $$
begin
    if old.revoked_at is not null and new is distinct from old then
        raise exception 'grant % was revoked by % and cannot change', old.id, old.revoked_by
            using errcode = 'LCF04';
    end if;
    if new.revoked_at is not null and old.revoked_at is null then
        if new.revoked_by = 'control-plane' then
            -- the control plane is whoever may write reconciliation records (the supervisor role)
            if not has_table_privilege('public.reconciliation_records', 'INSERT') then
                raise exception 'only the control plane may revoke as control-plane' using errcode = 'LCF04';
            end if;
        elsif not leasectl_is_ancestor(new.revoked_by, old.agent_id) then
            raise exception '% may not revoke grant % of %: only an ancestor in its delegation chain or the control plane',
                new.revoked_by, old.id, old.agent_id using errcode = 'LCF04';
        end if;
    end if;
    if new.agent_id <> old.agent_id or new.kind <> old.kind or new.resource <> old.resource
       or new.issued_by <> old.issued_by or new.issued_at <> old.issued_at then
        raise exception 'a grant is revoked or left alone, never rewritten' using errcode = 'LCF04';
    end if;
    return new;
end $$;

create trigger grants_guard
    before update on grants
    for each row execute function leasectl_grants_guard();

create function leasectl_agents_guard() returns trigger
language plpgsql set search_path = pg_catalog, public as $$
begin
    if old.state = 'terminated' and (new.state <> 'terminated' or new.parent_id is distinct from old.parent_id) then
        raise exception 'agent % is terminated', old.id using errcode = 'LCF05';
    end if;
    if new.state <> old.state and not (
           (old.state = 'running' and new.state in ('draining', 'aborting'))
        or (old.state = 'draining' and new.state in ('aborting', 'reconciling'))
        or (old.state = 'aborting' and new.state = 'reconciling')
        or (old.state = 'reconciling' and new.state = 'terminated')) then
        raise exception 'illegal agent transition % -> % for %', old.state, new.state, old.id
            using errcode = 'LCF05';
    end if;
    if new.parent_id is distinct from old.parent_id then
        raise exception 'an agent keeps its place in the delegation tree' using errcode = 'LCF05';
    end if;
    return new;
end $$;

create trigger agents_guard
    before update on agents
    for each row
    when (old.state is distinct from new.state or old.parent_id is distinct from new.parent_id)
    execute function leasectl_agents_guard();

-- the fleet's journal, written here so nobody can skip it
create function leasectl_fleet_journal() returns trigger
language plpgsql security definer set search_path = pg_catalog, public as $$
declare
    v_actor text := coalesce(nullif(current_setting('leasectl.actor', true), ''), session_user);
begin
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

create trigger agents_journal after insert or update of state on agents
    for each row execute function leasectl_fleet_journal();
create trigger shutdowns_journal after insert or update of state on shutdowns
    for each row execute function leasectl_fleet_journal();
create trigger grants_journal after insert or update of revoked_at on grants
    for each row execute function leasectl_fleet_journal();

-- reconciliation records and the fleet journal are append-only for everyone
create function leasectl_fleet_append_only() returns trigger
language plpgsql as $$
begin
    raise exception '% is append-only: % is refused', tg_table_name, tg_op using errcode = 'LCF06';
end $$;

create trigger reconciliation_records_append_only before update or delete on reconciliation_records
    for each row execute function leasectl_fleet_append_only();
create trigger reconciliation_records_no_truncate before truncate on reconciliation_records
    for each statement execute function leasectl_fleet_append_only();
create trigger fleet_events_append_only before update or delete on fleet_events
    for each row execute function leasectl_fleet_append_only();
create trigger fleet_events_no_truncate before truncate on fleet_events
    for each statement execute function leasectl_fleet_append_only();

-- ---------------------------------------------------------------------------------------
-- the control plane's role, and what the other roles may do with the fleet
revoke all on agents, grants, shutdowns, reconciliation_records, fleet_events from public;

do $$
begin
    if not exists (select 1 from pg_roles where rolname = 'leasectl_supervisor') then
        begin
            execute 'create role leasectl_supervisor nologin';
        exception
            when insufficient_privilege then
                raise notice 'leasectl: % may not create role leasectl_supervisor; skipping it', current_user;
            when duplicate_object or unique_violation then
                null;
        end;
    end if;
    if exists (select 1 from pg_roles where rolname = 'leasectl_supervisor') then
        grant select on all tables in schema public to leasectl_supervisor;
        grant insert on reconciliation_records, fleet_events, job_events to leasectl_supervisor;
        grant update (state, last_seen_at, terminated_confirmed_at) on agents to leasectl_supervisor;
        grant update (revoked_at, revoked_by) on grants to leasectl_supervisor;
        grant update (state, draining_at, aborting_at, reconciling_at, finished_at) on shutdowns to leasectl_supervisor;
        -- the sweep, cancels of a drained subtree, fencing of unconfirmed cancels
        grant update (state, owner_id, lease_until, fencing_token, finished_at, terminal_reason, error,
                      cancel_requested_at, cancel_requested_by, cancel_requested_reason)
            on tool_jobs to leasectl_supervisor;
    end if;
    if exists (select 1 from pg_roles where rolname = 'leasectl_worker') then
        grant select on agents, grants, shutdowns to leasectl_worker;
        -- agents register, heartbeat, confirm; ancestors revoke their descendants' grants
        grant insert on agents, grants to leasectl_worker;
        grant update (last_seen_at, terminated_confirmed_at) on agents to leasectl_worker;
        grant update (revoked_at, revoked_by) on grants to leasectl_worker;
        grant insert on fleet_events to leasectl_worker;
    end if;
    if exists (select 1 from pg_roles where rolname = 'leasectl_operator') then
        grant select on agents, grants, shutdowns, reconciliation_records, fleet_events to leasectl_operator;
        grant insert on shutdowns, fleet_events to leasectl_operator;
    end if;
    if exists (select 1 from pg_roles where rolname = 'leasectl_auditor') then
        grant select on agents, grants, shutdowns, reconciliation_records, fleet_events to leasectl_auditor;
    end if;
end $$;

insert into leasectl_migrations (version, name) values (4, '0004_fleet')
on conflict (version) do nothing;
