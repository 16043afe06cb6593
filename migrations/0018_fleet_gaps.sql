-- 0018: the fleet's last gaps (docs/seeds.md §003).
--
--   orphans      An agent whose ancestor is terminated, or silent for longer than
--                fleet.orphan_after_seconds (leasectl_settings, default 60), while it still runs
--                calls, was seen within that window or holds live grants, is orphaned:
--                leasectl_orphans() is the one answer the Fleet screen, Triage, the metrics and the
--                supervisor read (by leasectl_now(), the read views' clock: a pinned console
--                picture judges at its instant). A subtree a shutdown is already carrying out is
--                not orphaned: the shutdown is stopping it.
--   proposals    "The agent proposes, the control plane decides": a shutdown may start in state
--                `proposed` (leasectl_propose_shutdown: an agent, for its own subtree, by the login
--                that registered it; the supervisor, for an orphan's subtree). Nothing carries out
--                a proposal: only leasectl_decide_shutdown (operators and the control plane) moves
--                it to `requested`, or to `declined`, naming who decided.
--   upgrade      Drain, reconcile, restart: agents.generation (set by the database: one more than
--                the agent it replaces) and agents.replaces; a shutdown may name the
--                replacement_agent_id (registered to replace the shutdown's root, by the same
--                login), and then its queued calls move to the new generation instead of being
--                cancelled: each to the replacement's agent of the same kind at the same depth (and
--                registered by the same login),
--                journaled (fleet_events call_moved, or call_not_moved with why), and the
--                reconciliation record lists them (calls_moved).

-- ---------------------------------------------------------------------------------------
-- Columns

alter table public.agents
    add column generation integer not null default 1 check (generation >= 1),
    add column replaces   text references public.agents (id) check (replaces is distinct from id);

alter table public.shutdowns
    add column replacement_agent_id text references public.agents (id),
    add column decided_by           text,
    add column decided_at           timestamptz;
alter table public.shutdowns drop constraint shutdowns_state_check;
alter table public.shutdowns add constraint shutdowns_state_check
    check (state in ('proposed', 'declined', 'requested', 'draining', 'aborting', 'reconciling', 'terminated'));
-- one shutdown (or proposal) at a time per subtree root; a declined proposal is over
drop index public.shutdowns_active_root_idx;
create unique index shutdowns_active_root_idx on public.shutdowns (root_agent_id)
    where state not in ('terminated', 'declined');

alter table public.reconciliation_records
    add column calls_moved jsonb not null default '[]'::jsonb;  -- [{job_id, tool, from_agent_id, to_agent_id, at}]

alter table public.leasectl_settings drop constraint leasectl_settings_name_check;
alter table public.leasectl_settings add constraint leasectl_settings_name_check
    check (name in ('tools.allow_auto_register', 'fleet.orphan_after_seconds'));
insert into public.leasectl_settings (name, value) values ('fleet.orphan_after_seconds', '60')
on conflict (name) do nothing;

-- a replacement's moves and the orphan walk look agents up by these
create index agents_replaces_idx on public.agents (replaces) where replaces is not null;

-- ---------------------------------------------------------------------------------------
-- Generations: the database sets them, whatever a client sends, and they never change.
--   LCF09 an agent that replaces another login's agent, or a generation rewritten

create function public.leasectl_agents_generation() returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
declare
    v_old public.agents;
begin
    if tg_op = 'UPDATE' then
        if new.generation <> old.generation or new.replaces is distinct from old.replaces then
            raise exception 'agent % keeps its generation and what it replaces', old.id using errcode = 'LCF09';
        end if;
        return new;
    end if;
    if new.replaces is null then
        if not public.leasectl_is_exempt() then
            new.generation := 1;
        end if;
        return new;
    end if;
    select * into v_old from public.agents a where a.id = new.replaces;
    if found and public.leasectl_is_worker_login() and v_old.owner_role is distinct from session_user::text then
        -- its queued calls would move to this agent: only the login that registered it may replace it
        raise exception 'login % may not replace agent %: another login registered it', session_user, new.replaces
            using errcode = 'LCF09';
    end if;
    new.generation := coalesce(v_old.generation, 0) + 1;
    return new;
end $$;

create trigger agents_generation
    before insert or update of generation, replaces on public.agents
    for each row execute function public.leasectl_agents_generation();

-- ---------------------------------------------------------------------------------------
-- Orphans: the one rule.

create function public.leasectl_orphans()
returns table (agent_id text, ancestor_id text, why text, since timestamptz)
language sql stable set search_path = pg_catalog, public, pg_temp as $$
    with recursive settings as (
        select coalesce((public.leasectl_setting('fleet.orphan_after_seconds') #>> '{}')::numeric, 60)
               * interval '1 second' as after
    ),
    dead as (
        -- agents that can no longer look after their children: terminated, or silent too long
        select a.id, case when a.state = 'terminated' then 'terminated' else 'silent' end as why,
               coalesce(a.last_seen_at, a.started_at) as since
        from public.agents a cross join settings s
        where a.state = 'terminated' or coalesce(a.last_seen_at, a.started_at) < public.leasectl_now() - s.after
    ),
    below as (
        -- every live descendant of a dead agent, with the nearest dead ancestor
        select c.id, d.id as ancestor_id, d.why, d.since
        from dead d join public.agents c on c.parent_id = d.id
        where c.state <> 'terminated'
        union all
        select c.id, b.ancestor_id, b.why, b.since
        from below b join public.agents c on c.parent_id = b.id
        where c.state <> 'terminated' and c.id not in (select id from dead)
    ),
    shut as (
        select t.agent_id from public.shutdowns s
        cross join lateral public.leasectl_subtree(s.root_agent_id) t
        where s.state in ('requested', 'draining', 'aborting', 'reconciling')
    )
    select distinct on (b.id) b.id, b.ancestor_id, b.why, b.since
    from below b join public.agents a on a.id = b.id cross join settings s
    where b.id not in (select agent_id from shut)
      and (a.last_seen_at >= public.leasectl_now() - s.after
           or exists (select 1 from public.tool_jobs j
                      where j.agent_id = a.id and j.state in ('queued', 'running', 'cancel_requested'))
           or exists (select 1 from public.grants g
                      where g.agent_id = a.id and g.revoked_at is null and g.expires_at > public.leasectl_now()))
    order by b.id, b.since desc
$$;

-- ---------------------------------------------------------------------------------------
-- The shutdown guard of 0015, with proposals and a named replacement (marked 0018).

create or replace function public.leasectl_shutdowns_guard()
returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    if tg_op = 'INSERT' then
        -- (0018) a proposal may come from inside the subtree: it starts nothing by itself
        if new.state not in ('requested', 'proposed') or new.decided_by is not null or new.decided_at is not null then
            raise exception 'a shutdown starts requested (or proposed), undecided' using errcode = 'LCF02';
        end if;
        if new.state = 'requested' and exists (
               select 1 from public.leasectl_subtree(new.root_agent_id) s
               join public.agents a on a.id = s.agent_id
               where s.agent_id = new.requested_by and a.owner_role = session_user::text) then
            raise exception 'agent % is inside the subtree of %: a shutdown is requested from outside',
                new.requested_by, new.root_agent_id using errcode = 'LCF01';
        end if;
        return new;
    end if;
    if old.state in ('terminated', 'declined') and new is distinct from old then
        raise exception 'shutdown % is % and cannot change', old.id, old.state using errcode = 'LCF02';
    end if;
    if new.state <> old.state and not (
           (old.state = 'proposed' and new.state in ('requested', 'declined'))
        or (old.state = 'requested' and new.state in ('draining', 'aborting'))
        or (old.state = 'draining' and new.state in ('aborting', 'reconciling'))
        or (old.state = 'aborting' and new.state = 'reconciling')
        or (old.state = 'reconciling' and new.state = 'terminated')) then
        raise exception 'illegal shutdown transition % -> %', old.state, new.state using errcode = 'LCF02';
    end if;
    -- (0018) a proposal leaves `proposed` only by a named decision, once
    if old.state = 'proposed' and new.state <> 'proposed'
       and (coalesce(btrim(new.decided_by), '') = '' or new.decided_at is null) then
        raise exception 'proposal % is accepted or declined by someone named' , old.id using errcode = 'LCF02';
    end if;
    if old.state <> 'proposed' and (new.decided_by is distinct from old.decided_by
                                    or new.decided_at is distinct from old.decided_at) then
        raise exception 'shutdown % was decided already', old.id using errcode = 'LCF02';
    end if;
    if new.state = 'terminated' and old.state <> 'terminated'
       and not exists (select 1 from public.reconciliation_records r where r.shutdown_id = new.id) then
        raise exception 'shutdown % cannot be terminated without its reconciliation record', new.id
            using errcode = 'LCF03';
    end if;
    if new.root_agent_id <> old.root_agent_id or new.mode <> old.mode
       or new.requested_by <> old.requested_by or new.requested_at <> old.requested_at
       or new.replacement_agent_id is distinct from old.replacement_agent_id then
        raise exception 'who asked, when, for which subtree and for whom never change' using errcode = 'LCF02';
    end if;
    return new;
end $$;

-- ---------------------------------------------------------------------------------------
-- The fleet journal of 0013, with a proposal and a decision named as such (marked 0018).

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
                                                     'state_to', new.state, 'parent_id', new.parent_id,
                                                     'generation', new.generation, 'replaces', new.replaces)));
    elsif tg_table_name = 'shutdowns' then
        insert into public.fleet_events (kind, actor, agent_id, shutdown_id, reason, request_id, details)
        values (case when tg_op = 'INSERT' and new.state = 'proposed' then 'shutdown_proposed'  -- (0018)
                     when tg_op = 'INSERT' then 'shutdown_requested'
                     else 'shutdown_state_changed' end,
                case when tg_op = 'INSERT' then new.requested_by else v_actor end, new.root_agent_id, new.id,
                case when tg_op = 'INSERT' then new.reason end,
                case when tg_op = 'INSERT' then nullif(current_setting('leasectl.request_id', true), '')::uuid end,
                jsonb_strip_nulls(jsonb_build_object('mode', new.mode, 'window_seconds', new.window_seconds,
                                                     'state_from', case when tg_op = 'UPDATE' then old.state end,
                                                     'state_to', new.state,
                                                     'replacement_agent_id', new.replacement_agent_id)));
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
-- What stands in the way of a new shutdown (or proposal) of a subtree: one under way, or
-- proposed, whose subtree meets it. The refusal's words, for the journal.

create function public.leasectl_shutdown_refusal(p_agent public.agents, p_replacement text)
returns jsonb
language plpgsql stable set search_path = pg_catalog, public, pg_temp as $$
declare
    v_overlap record;
    v_new     public.agents;
begin
    if p_agent.state <> 'running' then
        return jsonb_build_object('refusal', 'agent ' || p_agent.id || ' is ' || p_agent.state,
                                  'agent_state', p_agent.state);
    end if;
    select s.id, s.root_agent_id, s.state into v_overlap
    from public.shutdowns s
    where s.state not in ('terminated', 'declined')
      and (s.root_agent_id in (select t.agent_id from public.leasectl_subtree(p_agent.id) t)
           or public.leasectl_is_ancestor(s.root_agent_id, p_agent.id))
    limit 1;
    if v_overlap.id is not null then
        return jsonb_build_object('shutdown_under_way', v_overlap.id, 'refusal', case
            when v_overlap.state = 'proposed'
                then 'a shutdown of ' || v_overlap.root_agent_id || ' is proposed: accept or decline it first'
            else 'a shutdown of ' || v_overlap.root_agent_id || ' is already under way' end);
    end if;
    if p_replacement is not null then
        select * into v_new from public.agents a where a.id = p_replacement;
        return jsonb_build_object('refusal', case
            when not found then 'no agent ' || p_replacement || ' to take over'
            when exists (select 1 from public.leasectl_subtree(p_agent.id) t where t.agent_id = p_replacement)
                then 'agent ' || p_replacement || ' is inside the subtree it would take over from'
            when v_new.replaces is distinct from p_agent.id
                then 'agent ' || p_replacement || ' was not registered to replace ' || p_agent.id
            when v_new.owner_role is distinct from p_agent.owner_role
                then 'agent ' || p_replacement || ' belongs to another login than ' || p_agent.id
            when v_new.state <> 'running' then 'agent ' || p_replacement || ' is ' || v_new.state
            end);
    end if;
    return jsonb_build_object('refusal', null);
end $$;

-- A shutdown opened (requested by an operator, proposed by an agent or the control plane), or
-- its refusal journaled with the words above and the request id of the transaction, if any.
create function public.leasectl_open_shutdown(p_agent public.agents, p_mode text, p_state text, p_by text,
                                              p_reason text, p_window_seconds numeric, p_replacement text)
returns table (id uuid, root_agent_id text, mode text, state text, requested_by text, reason text,
               requested_at timestamptz, window_seconds numeric)
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
#variable_conflict use_column
declare
    v_refusal jsonb := public.leasectl_shutdown_refusal(p_agent, p_replacement);
begin
    if v_refusal ->> 'refusal' is null then
        return query
        insert into public.shutdowns as s (root_agent_id, mode, state, requested_by, reason, window_seconds,
                                           replacement_agent_id)
        values (p_agent.id, p_mode, p_state, p_by, p_reason, p_window_seconds, p_replacement)
        on conflict do nothing
        returning s.id, s.root_agent_id, s.mode, s.state, s.requested_by, s.reason, s.requested_at,
                  s.window_seconds;
        if found then
            return;
        end if;
        v_refusal := jsonb_build_object('refusal', 'a shutdown of ' || p_agent.id || ' was ' || p_state
                                                   || ' at the same moment');
    end if;
    insert into public.fleet_events (kind, actor, agent_id, reason, request_id, details)
    values ('shutdown_refused', p_by, p_agent.id, p_reason,
            nullif(current_setting('leasectl.request_id', true), '')::uuid,
            jsonb_strip_nulls(jsonb_build_object('mode', p_mode, 'replacement_agent_id', p_replacement,
                                                 'proposal', case when p_state = 'proposed' then true end))
            || v_refusal);
end $$;

-- ---------------------------------------------------------------------------------------
-- The operator's request of 0013 with a replacement (the five-argument form is this one's).

create function public.leasectl_request_shutdown(p_root_agent_id text, p_mode text, p_requested_by text,
                                                 p_reason text, p_window_seconds numeric,
                                                 p_replacement_agent_id text)
returns table (id uuid, root_agent_id text, mode text, state text, requested_by text, reason text,
               requested_at timestamptz, window_seconds numeric)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
#variable_conflict use_column
declare
    v_agent   public.agents;
begin
    if coalesce(btrim(p_requested_by), '') = '' then
        raise exception 'an operator name is required: it is journaled with the request' using errcode = '22023';
    end if;
    select * into v_agent from public.agents a where a.id = p_root_agent_id;
    if not found then
        return;  -- no such agent: nothing to journal
    end if;
    return query select * from public.leasectl_open_shutdown(v_agent, p_mode, 'requested', p_requested_by, p_reason,
                                                             p_window_seconds, p_replacement_agent_id);
end $$;

create or replace function public.leasectl_request_shutdown(p_root_agent_id text, p_mode text, p_requested_by text,
                                                            p_reason text, p_window_seconds numeric)
returns table (id uuid, root_agent_id text, mode text, state text, requested_by text, reason text,
               requested_at timestamptz, window_seconds numeric)
language sql security definer set search_path = pg_catalog, public, pg_temp as $$
    select * from public.leasectl_request_shutdown(p_root_agent_id, p_mode, p_requested_by, p_reason,
                                                   p_window_seconds, null)
$$;

-- ---------------------------------------------------------------------------------------
-- An agent proposes a shutdown of its own subtree (the login that registered it speaks for it);
-- the control plane proposes one for an orphan. Refusals are journaled as an operator's are.

create function public.leasectl_propose_shutdown(p_agent_id text, p_mode text, p_reason text,
                                                 p_proposed_by text default null)
returns table (id uuid, root_agent_id text, mode text, state text, requested_by text, reason text,
               requested_at timestamptz, window_seconds numeric)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
#variable_conflict use_column
declare
    v_agent   public.agents;
    v_by      text := p_agent_id;
begin
    if coalesce(btrim(p_reason), '') = '' or p_mode not in ('drain', 'abort') then
        raise exception 'a proposal names its mode (drain or abort) and a reason' using errcode = '22023';
    end if;
    select * into v_agent from public.agents a where a.id = p_agent_id;
    if not found then
        return;
    end if;
    -- the caller, not this function's owner: the control plane is a login that may write records
    if pg_catalog.has_table_privilege(session_user, 'public.reconciliation_records', 'INSERT') then
        v_by := coalesce(nullif(btrim(p_proposed_by), ''), 'control-plane');
    elsif v_agent.owner_role is distinct from session_user::text then
        raise exception 'login % may not propose for agent %: it did not register it', session_user, p_agent_id
            using errcode = 'LCF09';
    end if;
    return query select * from public.leasectl_open_shutdown(v_agent, p_mode, 'proposed', v_by, p_reason,
                                                             case p_mode when 'drain' then 300 else 60 end, null);
end $$;

-- the supervisor's pass: one proposal (an abort) per orphan nearest its dead ancestor, unless a
-- shutdown already covers it or a human declined one since that ancestor went quiet
create function public.leasectl_propose_orphan_shutdowns(p_supervisor text)
returns table (id uuid, root_agent_id text, reason text)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
#variable_conflict use_column
declare
    o record;
    v_made record;
begin
    for o in
        select o.agent_id, o.ancestor_id, o.why, o.since
        from public.leasectl_orphans() o
        join public.agents a on a.id = o.agent_id
        where a.parent_id = o.ancestor_id  -- the top of the orphaned subtree
          and not exists (select 1 from public.shutdowns s
                          where s.root_agent_id = o.agent_id and s.state = 'declined' and s.decided_at >= o.since)
        order by o.agent_id
    loop
        select * into v_made from public.leasectl_propose_shutdown(
            o.agent_id, 'abort',
            'orphaned: ' || o.ancestor_id || case o.why when 'terminated' then ' is terminated'
                                               else ' is silent since ' || to_char(o.since, 'YYYY-MM-DD HH24:MI:SS TZ') end
            || ' and ' || o.agent_id || ' still runs', p_supervisor) p;
        if v_made.id is not null then
            id := v_made.id; root_agent_id := v_made.root_agent_id; reason := v_made.reason;
            return next;
        end if;
    end loop;
end $$;

-- An operator (or the control plane) accepts a proposal (it becomes a requested shutdown, which
-- the supervisor then carries out) or declines it; journaled with the name and reason.
create function public.leasectl_decide_shutdown(p_shutdown_id uuid, p_operator text, p_accept boolean,
                                                p_reason text, p_window_seconds numeric default null)
returns table (id uuid, root_agent_id text, mode text, state text, requested_by text, reason text,
               decided_by text, decided_at timestamptz, window_seconds numeric)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
#variable_conflict use_column
declare
    v_row public.shutdowns;
begin
    if coalesce(p_operator ~ '[[:alnum:]]' and btrim(p_reason) <> '', false) is false then
        raise exception 'an operator name and a reason are required: both are journaled with the decision'
            using errcode = '22023';
    end if;
    perform set_config('leasectl.actor', p_operator, true);
    update public.shutdowns s
    set state = case when p_accept then 'requested' else 'declined' end,
        decided_by = p_operator, decided_at = now(),
        window_seconds = coalesce(p_window_seconds, s.window_seconds),
        finished_at = case when p_accept then null else now() end
    where s.id = p_shutdown_id and s.state = 'proposed'
    returning s.* into v_row;
    if not found then
        return;  -- no such proposal, or decided already: nothing changed, nothing journaled
    end if;
    insert into public.fleet_events (kind, actor, agent_id, shutdown_id, reason, request_id, details)
    values (case when p_accept then 'shutdown_accepted' else 'shutdown_declined' end, p_operator,
            v_row.root_agent_id, v_row.id, p_reason, nullif(current_setting('leasectl.request_id', true), '')::uuid,
            jsonb_build_object('mode', v_row.mode, 'proposed_by', v_row.requested_by,
                               'window_seconds', v_row.window_seconds));
    return query select v_row.id, v_row.root_agent_id, v_row.mode, v_row.state, v_row.requested_by, v_row.reason,
                        v_row.decided_by, v_row.decided_at, v_row.window_seconds;
end $$;

-- ---------------------------------------------------------------------------------------
-- The upgrade path: a shutdown that names a replacement moves its subtree's queued calls to
-- the new generation, each to the replacement's agent of the same kind at the same depth (the
-- root's to the replacement). A call whose chain has a cancel request, or that has no such
-- agent to go to, stays to be cancelled, and the journal says why.

create function public.leasectl_move_queued_calls(p_shutdown_id uuid)
returns table (job_id uuid, tool text, from_agent_id text, to_agent_id text, why_not text)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
#variable_conflict use_column
declare
    v_s public.shutdowns;
    c record;
begin
    select * into v_s from public.shutdowns s
    where s.id = p_shutdown_id and s.state in ('draining', 'aborting', 'reconciling')
      and s.replacement_agent_id is not null;
    if not found then
        return;
    end if;
    perform set_config('leasectl.actor', 'control-plane', true);
    for c in
        with old_tree as (
            select t.agent_id, t.depth, a.kind from public.leasectl_subtree(v_s.root_agent_id) t
            join public.agents a on a.id = t.agent_id
        ),
        new_tree as (
            -- only the new root's login's agents: another login's child under it takes nothing
            select t.agent_id, t.depth, a.kind from public.leasectl_subtree(v_s.replacement_agent_id) t
            join public.agents a on a.id = t.agent_id
            where a.state = 'running'
              and a.owner_role is not distinct from (select r.owner_role from public.agents r
                                                     where r.id = v_s.replacement_agent_id)
        ),
        target as (
            select o.agent_id as from_id,
                   case when o.depth = 0 then v_s.replacement_agent_id
                        when (select count(*) from new_tree n where n.kind = o.kind and n.depth = o.depth) = 1
                            then (select n.agent_id from new_tree n where n.kind = o.kind and n.depth = o.depth)
                   end as to_id
            from old_tree o
        )
        select j.id, j.tool, j.agent_id, t.to_id, j.chain_id
        from public.tool_jobs j
        join target t on t.from_id = j.agent_id
        where j.state = 'queued'
        for no key update of j skip locked
    loop
        job_id := c.id; tool := c.tool; from_agent_id := c.agent_id; to_agent_id := c.to_id; why_not := case
            when public.leasectl_chain_cancelled(c.chain_id) then 'its chain has a cancel request'
            when c.to_id is null then 'no running agent of its kind at its depth under ' || v_s.replacement_agent_id
            when not exists (select 1 from public.agents a where a.id = c.to_id and a.state = 'running')
                then v_s.replacement_agent_id || ' is no longer running'
        end;
        if why_not is null then
            update public.tool_jobs j set agent_id = c.to_id where j.id = c.id and j.state = 'queued';
        else
            to_agent_id := null;
        end if;
        insert into public.fleet_events (kind, actor, agent_id, shutdown_id, reason, details)
        values (case when why_not is null then 'call_moved' else 'call_not_moved' end, 'control-plane',
                c.agent_id, v_s.id, why_not,
                jsonb_strip_nulls(jsonb_build_object('job_id', c.id, 'tool', c.tool, 'to_agent_id', to_agent_id)));
        return next;
    end loop;
end $$;

-- ---------------------------------------------------------------------------------------
-- The claim takes its slots itself (queries/worker/claim.sql calls leasectl_take_slot for each cap
-- it knows applies), one function call and a tools lookup fewer than through leasectl_claim_room,
-- which the guard keeps calling to check them. leasectl_take_slot answers true for a call that
-- holds a slot already and never gives one call a second slot of a cap: a worker login that calls
-- it by hand can take no more than the claim would. The guard's check, leasectl_claim_room, first
-- asks in one lookup whether the call holds a slot of each cap that applies (what a claim through
-- worker/claim.sql always finds), and takes slots only for a claim written by hand.
create or replace function public.leasectl_claim_room(p_tool text, p_agent text, p_job uuid) returns boolean
language plpgsql volatile security definer set search_path = pg_catalog, public, pg_temp as $$
begin
    if exists (select 1 from public.tools t
               where t.name = p_tool
                 and (t.max_running is null
                      or exists (select 1 from public.leasectl_cap_slots s
                                 where s.kind = 'tool' and s.key = p_tool and s.job_id = p_job))
                 and (p_agent is null
                      or not exists (select 1 from public.agents a where a.id = p_agent and a.max_running is not null)
                      or exists (select 1 from public.leasectl_cap_slots s
                                 where s.kind = 'agent' and s.key = p_agent and s.job_id = p_job))) then
        return true;
    end if;
    -- a claim written by hand: 0016's way, the tool's slot first
    if exists (select 1 from public.tools t where t.name = p_tool and t.max_running is not null)
       and not public.leasectl_take_slot('tool', p_tool, p_job) then
        return false;
    end if;
    return p_agent is null
        or not exists (select 1 from public.agents a where a.id = p_agent and a.max_running is not null)
        or public.leasectl_take_slot('agent', p_agent, p_job);
end $$;

do $$
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_worker') then
        grant execute on function public.leasectl_take_slot(text, text, uuid) to leasectl_worker;
    end if;
end $$;

-- ---------------------------------------------------------------------------------------
-- The operator journal's fleet rows (0017's indexes, for the decisions)
drop index public.fleet_events_operator_idx;
drop index public.fleet_events_operator_at_idx;
create index fleet_events_operator_idx on public.fleet_events (actor, at)
    where kind in ('shutdown_requested', 'shutdown_refused', 'tool_paused', 'tool_resumed', 'operator_revoke',
                   'shutdown_accepted', 'shutdown_declined');
create index fleet_events_operator_at_idx on public.fleet_events (at)
    where kind in ('shutdown_requested', 'shutdown_refused', 'tool_paused', 'tool_resumed', 'operator_revoke',
                   'shutdown_accepted', 'shutdown_declined');

revoke all on function public.leasectl_request_shutdown(text, text, text, text, numeric, text) from public;
revoke all on function public.leasectl_propose_shutdown(text, text, text, text) from public;
revoke all on function public.leasectl_propose_orphan_shutdowns(text) from public;
revoke all on function public.leasectl_decide_shutdown(uuid, text, boolean, text, numeric) from public;
revoke all on function public.leasectl_move_queued_calls(uuid) from public;
revoke all on function public.leasectl_shutdown_refusal(public.agents, text) from public;
revoke all on function public.leasectl_open_shutdown(public.agents, text, text, text, text, numeric, text) from public;
do $$
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_operator') then
        grant execute on function public.leasectl_request_shutdown(text, text, text, text, numeric, text)
            to leasectl_operator;
        grant execute on function public.leasectl_propose_shutdown(text, text, text, text)
            to leasectl_worker, leasectl_supervisor;
        grant execute on function public.leasectl_propose_orphan_shutdowns(text) to leasectl_supervisor;
        grant execute on function public.leasectl_decide_shutdown(uuid, text, boolean, text, numeric)
            to leasectl_operator, leasectl_supervisor;
        grant execute on function public.leasectl_move_queued_calls(uuid) to leasectl_supervisor;
        grant execute on function public.leasectl_orphans()
            to leasectl_operator, leasectl_supervisor, leasectl_auditor, leasectl_worker;
    end if;
end $$;
select public.leasectl_give_to_owner('public.leasectl_request_shutdown(text, text, text, text, numeric, text)');
select public.leasectl_give_to_owner('public.leasectl_request_shutdown(text, text, text, text, numeric)');
select public.leasectl_give_to_owner('public.leasectl_propose_shutdown(text, text, text, text)');
select public.leasectl_give_to_owner('public.leasectl_propose_orphan_shutdowns(text)');
select public.leasectl_give_to_owner('public.leasectl_decide_shutdown(uuid, text, boolean, text, numeric)');
select public.leasectl_give_to_owner('public.leasectl_move_queued_calls(uuid)');

insert into leasectl_migrations (version, name) values (18, '0018_fleet_gaps')
on conflict (version) do nothing;
