-- 0026: a capped claim takes its slots in one call and one statement per cap, at a cost that does
-- not grow with the calls that run, and a retried call never starts on a slot another claimer is
-- taking (issue 26: caps held under any number of claimers; the claim with caps at >= 0.9 x without).
--
-- Up to 0025 a capped claim called leasectl_take_slot from worker/claim.sql once per cap (four
-- statements: the slot it may hold, a free one locked, that one judged again, the write), and the
-- guard then called leasectl_claim_room to read the slots again. Now:
--
--   taking     leasectl_take_slots(tool, tool capped, agent, agent capped, call, may hold one): both
--              caps in one call, one statement per cap (the slot chosen and written at once, judged
--              under row locks instead of the snapshot). A call that ran before keeps the slot that
--              names it. The slot's call is looked up by its key: 0016's NOT EXISTS was planned as a
--              hashed subplan over every running call of every tool, built at each claim, so a
--              capped claim cost more the more calls ran (measured, 20,000 running calls of another
--              tool: +240 us per capped claim).
--   checking   leasectl_claim_room (the guard's) counts a slot as the call's only when this
--              transaction wrote it (see below: a stale slot let a retried call run one above the cap).

-- ---------------------------------------------------------------------------------------
-- Taking the slots: each cap that applies, the tool's first; true when every one has a slot for the
-- call, false when one has none free (a slot taken already stays taken until this transaction ends:
-- the claim then claims nothing and its statement, or the guard, undoes nothing else).
--   p_held: the call may hold a slot already (it ran before: a reclaim, or a retry whose old slot
--   nobody took since), which it then keeps instead of taking a second one.
-- One statement per cap: the slot is chosen and written at once, and whether its call still runs is
-- judged under locks, not under the statement's snapshot. The slot's row is locked (FOR UPDATE, SKIP
-- LOCKED: one another claimer is taking is passed by) and so is its call's row (FOR KEY SHARE, SKIP
-- LOCKED: a call that is being claimed or reclaimed right now is passed by; heartbeats and endings
-- do not conflict with it). A row that changed since the snapshot is judged again in its newest
-- version, both of them: a slot that another claimer's committed claim took meanwhile names another
-- call than the row locked with it, and a call claimed again meanwhile runs, so neither is taken.
-- (Up to 0025 the call's state was read under the snapshot, which cannot see a claim committed
-- after it: a statement of its own then judged the slot again.) A slot that never held a call, or
-- whose call is gone, is the rare case: 0016's two steps.
create function public.leasectl_take_slots(p_tool text, p_tool_capped boolean, p_agent text,
                                           p_agent_capped boolean, p_job uuid, p_held boolean)
returns boolean
language plpgsql volatile security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    v_kind text;
    v_key text;
    v_n integer;
    v_after integer;
    v_taken boolean;
begin
    for i in 1..2 loop
        if i = 1 then
            continue when not p_tool_capped;
            v_kind := 'tool';
            v_key := p_tool;
        else
            exit when not p_agent_capped or p_agent is null;
            v_kind := 'agent';
            v_key := p_agent;
        end if;
        if p_held then
            -- the slot that names this call first (its row is this claim's, locked already)
            update public.leasectl_cap_slots s set job_id = p_job
            from (select f.n
                  from public.leasectl_cap_slots f
                  join public.tool_jobs r on r.id = f.job_id
                  where f.kind = v_kind and f.key = v_key
                    and (r.id = p_job or r.state not in ('running', 'cancel_requested'))
                  order by r.id = p_job desc, f.n
                  limit 1
                  for update of f skip locked
                  for key share of r skip locked) free
            where s.kind = v_kind and s.key = v_key and s.n = free.n;
        else
            update public.leasectl_cap_slots s set job_id = p_job
            from (select f.n
                  from public.leasectl_cap_slots f
                  join public.tool_jobs r on r.id = f.job_id
                  where f.kind = v_kind and f.key = v_key
                    and r.state not in ('running', 'cancel_requested')
                  order by f.n
                  limit 1
                  for update of f skip locked
                  for key share of r skip locked) free
            where s.kind = v_kind and s.key = v_key and s.n = free.n;
        end if;
        v_taken := found;
        v_after := 0;
        -- a slot with no call (never used, or its call is gone): locked, then judged again by a
        -- statement of its own, whose snapshot sees a call that another claimer's committed claim
        -- put into it since the one that locked it
        while not v_taken loop
            select s.n into v_n
            from public.leasectl_cap_slots s
            where s.kind = v_kind and s.key = v_key and s.n > v_after
              and (s.job_id is null
                   or not exists (select from public.tool_jobs r where r.id = s.job_id offset 0))
            order by s.n
            limit 1
            for update skip locked;
            if not found then
                return false;
            end if;
            update public.leasectl_cap_slots s set job_id = p_job
            where s.kind = v_kind and s.key = v_key and s.n = v_n
              and (s.job_id is null
                   or not exists (select from public.tool_jobs r where r.id = s.job_id offset 0));
            v_taken := found;
            v_after := v_n;
        end loop;
    end loop;
    return true;
end $$;

-- one cap (0016's signature, kept for a client that calls it)
create or replace function public.leasectl_take_slot(p_kind text, p_key text, p_job uuid) returns boolean
language plpgsql volatile security definer set search_path = pg_catalog, public, pg_temp as $$
begin
    if p_kind = 'tool' then
        return public.leasectl_take_slots(p_key, true, null, false, p_job, true);
    end if;
    return public.leasectl_take_slots(null, false, p_key, p_kind = 'agent', p_job, true);
end $$;

-- The guard's check (0018's leasectl_claim_room): a claim holds a slot of each cap that applies when
-- a slot names the call AND this transaction wrote that slot's row (worker/claim.sql took it as it
-- chose the call, leasectl_take_slots). A slot that only names the call is no proof: one whose call
-- was given back to the queue is free to every other claimer (a slot frees itself, nothing clears
-- it), and up to 0025 it passed here unlocked, so a retried call could start beside the claimer that
-- was taking its old slot at that moment, one above the cap. A claim written by hand took no slot:
-- its slots are taken now, the call's own first, or the guard refuses it (LCS15).
create or replace function public.leasectl_claim_room(p_tool text, p_agent text, p_job uuid) returns boolean
language plpgsql volatile security definer set search_path = pg_catalog, public, pg_temp as $$
begin
    if exists (select 1 from public.tools t
               where t.name = p_tool
                 and (t.max_running is null
                      or exists (select 1 from public.leasectl_cap_slots s
                                 where s.kind = 'tool' and s.key = p_tool and s.job_id = p_job
                                   and s.xmin = pg_current_xact_id_if_assigned()::xid))
                 and (p_agent is null
                      or not exists (select 1 from public.agents a where a.id = p_agent and a.max_running is not null)
                      or exists (select 1 from public.leasectl_cap_slots s
                                 where s.kind = 'agent' and s.key = p_agent and s.job_id = p_job
                                   and s.xmin = pg_current_xact_id_if_assigned()::xid))) then
        return true;
    end if;
    return public.leasectl_take_slots(
        p_tool, exists (select 1 from public.tools t where t.name = p_tool and t.max_running is not null),
        p_agent, p_agent is not null
                 and exists (select 1 from public.agents a where a.id = p_agent and a.max_running is not null),
        p_job, true);
end $$;

revoke all on function public.leasectl_take_slots(text, boolean, text, boolean, uuid, boolean) from public;
do $$
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_worker') then
        grant execute on function public.leasectl_take_slots(text, boolean, text, boolean, uuid, boolean)
            to leasectl_worker;
    end if;
end $$;

insert into leasectl_migrations (version, name) values (26, '0026_cap_slot_once')
on conflict (version) do nothing;
