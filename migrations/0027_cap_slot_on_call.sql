-- 0027: a cap's slot is written on the call it holds, taken by the guard as the call is claimed
-- (issue 26: the claim with caps at >= 0.9 x the claim without, in the same run).
--
-- Up to 0026 a capped claim wrote a row of leasectl_cap_slots (worker/claim.sql called
-- leasectl_take_slots, one UPDATE that locked the slot's row and the row of the call that held it
-- last), and the guard then called leasectl_claim_room to read it back: two plpgsql calls, two more
-- rows written or locked, and their WAL, per capped claim (measured on PostgreSQL 18 here, server
-- CPU per call of the reference worker, capped / uncapped: 1.18, paired over 5 rounds).
--
-- Now the slot is a column of the call (tool_slot, agent_slot: 1..max_running while the call runs,
-- kept as it was when it stops: only a running call's slot counts), and the guard takes it when a
-- queued call is claimed, with what the claim already pays for: no row is written but the call's.
-- Who holds slot s is judged under an advisory lock of the slot (transaction-scoped, try-only: a
-- slot another claimer is taking is passed by, nobody waits), by a statement whose snapshot is
-- taken after the lock, so a claim that took s and committed meanwhile is seen. The locks never
-- outlive a claim's transaction, and nothing has to free a slot: a call that stops running leaves
-- it.
--
-- A cap set over calls that run with no slot, or lowered below the slots they hold, makes them
-- "irregular" for the moment: the calls of that tool (or agent) are then counted instead, one claim
-- at a time (the cap's lock 0 taken exclusively, its slot claims holding it shared), until they end.
--
-- A claim that finds no slot free is refused (LCS15), or passed over without a row when the
-- statement asked it (worker/claim.sql, complete_and_claim.sql and claim_many.sql set
-- leasectl.claim_passes_full_caps for their transaction: another claimer took the last slot since
-- their snapshot). That setting only changes how a refusal is told: no call starts past a cap
-- either way. The slots are the guard's to write: a change of either by anything else is refused
-- (LCS05).

alter table public.tool_jobs add column tool_slot integer, add column agent_slot integer;

-- the running calls keep the slots 0016's table gave them
update public.tool_jobs j
set tool_slot = s.n
from public.leasectl_cap_slots s
where s.kind = 'tool' and s.key = j.tool and s.job_id = j.id and j.state in ('running', 'cancel_requested');
update public.tool_jobs j
set agent_slot = s.n
from public.leasectl_cap_slots s
where s.kind = 'agent' and s.key = j.agent_id and s.job_id = j.id and j.state in ('running', 'cancel_requested');

drop trigger tools_cap_slots_insert on public.tools;
drop trigger tools_cap_slots_update on public.tools;
drop trigger agents_cap_slots_insert on public.agents;
drop trigger agents_cap_slots_update on public.agents;
drop function public.leasectl_take_slot(text, text, uuid);
drop function public.leasectl_take_slots(text, boolean, text, boolean, uuid, boolean);
drop function public.leasectl_claim_room(text, text, uuid);
drop function public.leasectl_cap_slots_follow();
drop table public.leasectl_cap_slots;

-- an agent's running calls, for its cap's count (tool_jobs_agent_live_idx holds its queued calls too)
create index tool_jobs_agent_running_idx on public.tool_jobs (agent_id)
    where agent_id is not null and state in ('running', 'cancel_requested');

-- ---------------------------------------------------------------------------------------
-- The slots of a claim: {tool's, agent's} (null for a cap that does not apply). When one cap has none
-- free now: null if the claim statement asked to be passed over (leasectl.claim_passes_full_caps),
-- else the claim is refused (LCS15). p_job is the call being claimed (queued, or earlier in this
-- statement).
-- Run by the guard as the claiming login: tool_jobs is readable by every login.
-- Its statements keep one generic plan each: left to choose, the plan cache kept planning the count
-- of the running calls anew at every claim (a custom plan per call, the tool's name and the call's id
-- as constants), which cost a capped claim more than all the rest of its slot (measured, server CPU
-- per call of the reference worker, capped / uncapped, paired over 5 rounds: 1.14 left to choose,
-- 1.03 with the generic plan). Their plan does not depend on the values: a key lookup each.
create function public.leasectl_cap_slots_take(p_tool text, p_tool_max integer, p_agent text,
                                               p_agent_max integer, p_job uuid)
returns integer[]
language plpgsql volatile
set search_path = pg_catalog, public, pg_temp set plan_cache_mode = force_generic_plan as $$
declare
    v_slots integer[] := array[null, null]::integer[];
    v_max integer;
    v_lock integer;
    v_n bigint;
    v_odd bigint;
    v_taken integer[];
    v_free boolean;
    v_alone boolean;
begin
    <<take>>
    for i in 1..2 loop
        if i = 1 then
            continue when p_tool_max is null;
            v_max := p_tool_max;
            v_lock := hashtext('leasectl cap tool ' || p_tool);
        else
            exit when p_agent_max is null or p_agent is null;
            v_max := p_agent_max;
            v_lock := hashtext('leasectl cap agent ' || p_agent);
        end if;
        -- the cap's lock 0, shared by the slot claims: none while an irregular count runs (below)
        if not pg_try_advisory_xact_lock_shared(v_lock, 0) then
            v_slots := null;
            exit take;
        end if;
        -- what runs, by a snapshot taken after that lock (a calls' slot, or none, and how many); when
        -- some run with no slot of this cap (it was set or lowered over them), counted once more with
        -- lock 0 exclusive (no slot claim is under way, none starts), by a snapshot after that lock
        v_alone := false;
        <<recount>>
        loop
            if i = 1 then
                select count(*), count(*) filter (where r.tool_slot is null or r.tool_slot > v_max),
                       coalesce(array_agg(r.tool_slot) filter (where r.tool_slot is not null), '{}')
                  into v_n, v_odd, v_taken
                  from public.tool_jobs r
                 where r.tool = p_tool and r.state in ('running', 'cancel_requested') and r.id <> p_job;
            else
                select count(*), count(*) filter (where r.agent_slot is null or r.agent_slot > v_max),
                       coalesce(array_agg(r.agent_slot) filter (where r.agent_slot is not null), '{}')
                  into v_n, v_odd, v_taken
                  from public.tool_jobs r
                 where r.agent_id = p_agent and r.state in ('running', 'cancel_requested') and r.id <> p_job;
            end if;
            if v_n >= v_max then
                v_slots := null;
                exit take;
            end if;
            exit recount when v_odd = 0 or v_alone;
            if not pg_try_advisory_xact_lock(v_lock, 0) then
                v_slots := null;
                exit take;
            end if;
            v_alone := true;
        end loop;
        if v_alone then
            -- counted one claim at a time: the first slot no running call holds is this call's
            for s in 1..v_max loop
                if not s = any (v_taken) then
                    v_slots[i] := s;
                    exit;
                end if;
            end loop;
            continue;
        end if;
        -- a free slot, locked, then judged again by a statement whose snapshot follows the lock: a
        -- claim that took it and committed since the count above is seen
        for s in 1..v_max loop
            continue when s = any (v_taken);
            if pg_try_advisory_xact_lock(v_lock, s) then
                if i = 1 then
                    v_free := not exists (select 1 from public.tool_jobs r
                                          where r.tool = p_tool and r.state in ('running', 'cancel_requested')
                                            and r.tool_slot = s and r.id <> p_job);
                else
                    v_free := not exists (select 1 from public.tool_jobs r
                                          where r.agent_id = p_agent and r.state in ('running', 'cancel_requested')
                                            and r.agent_slot = s and r.id <> p_job);
                end if;
                if v_free then
                    v_slots[i] := s;
                    exit;
                end if;
            end if;
        end loop;
        if v_slots[i] is null then
            v_slots := null;
            exit take;
        end if;
    end loop;
    if v_slots is null then
        -- no slot free now: worker/claim.sql and its kin asked to be told by no row (another claimer
        -- took the last one since their snapshot); any other claim is refused
        if current_setting('leasectl.claim_passes_full_caps', true) = 'on' then
            return null;
        end if;
        raise exception 'call %: tool % or agent % already runs as many calls as its max_running allows',
            p_job, p_tool, p_agent using errcode = 'LCS15';
    end if;
    return v_slots;
end $$;

-- ---------------------------------------------------------------------------------------
-- The guard (0016's), whose claim takes the slots (the fast path's lookup reads both caps), and
-- whose other changes keep them.
create or replace function public.leasectl_tool_jobs_guard()
returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
declare
    v_side_effect text;
    v_agent_state text;
    v_max integer;
    v_fast boolean;
    v_hold numeric;
    v_paused boolean;
    v_tool_max integer;
    v_agent_max integer;
    v_slots integer[];
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
        -- (0016) a hold starts with a claim
        new.hold_until := null;
        -- (0027) a slot under a cap is taken by a claim
        new.tool_slot := null;
        new.agent_slot := null;
    else
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
        -- The two transitions every call makes, accepted in two tests when they are exactly what
        -- every rule below accepts unchanged (0009's fast paths, with 0014's chain rules and this
        -- walk's story rules folded in: three row triggers cost ~200 µs of server CPU per call, one
        -- with these tests a small part of that; README, "Before and after 0014 and 0015"). A
        -- plpgsql expression is prepared again in each transaction, so the tests are as short as
        -- the rules allow and what both transitions share is one test. Anything else -- a stale
        -- transaction, a chain asked to stop, a touched check, a finish time given by the client --
        -- falls through to the rules, which say what is wrong. The tests read only the row (a
        -- condition with a subquery runs through the executor even when its first term is false).
        -- Both: nothing immutable, nothing of the call's story but the transition's own, no chain,
        -- deadline or check touched, from a fresh read committed transaction (LCS12).
        if (old.state = 'queued' and new.state = 'running' or old.state = 'running' and new.state = 'succeeded')
           and new.finished_at is null
           and new.id = old.id and new.idempotency_key = old.idempotency_key and new.tool = old.tool
           and new.payload is not distinct from old.payload and new.created_at = old.created_at
           and new.error is not distinct from old.error
           and new.terminal_reason is not distinct from old.terminal_reason
           and new.side_effect_started_at is not distinct from old.side_effect_started_at
           and new.external_request_id is not distinct from old.external_request_id
           and new.cancel_requested_at is not distinct from old.cancel_requested_at
           and new.completed_despite_cancel = old.completed_despite_cancel
           and new.parent_id is not distinct from old.parent_id and new.chain_id = old.chain_id
           and new.stage = old.stage and new.accepted_at = old.accepted_at
           and new.trace_id is not distinct from old.trace_id and new.deadline_at is not distinct from old.deadline_at
           and new.hold_until is not distinct from old.hold_until
           and new.tool_slot is not distinct from old.tool_slot and new.agent_slot is not distinct from old.agent_slot
           and (new.checked_at, new.check_found, new.check_token, new.check_details)
               is not distinct from (old.checked_at, old.check_found, old.check_token, old.check_details)
           and clock_timestamp() <= now() + interval '2 seconds'
           and current_setting('transaction_isolation') = 'read committed' then
            -- A claim: a new owner that is this login's own (or a session the identity rule does
            -- not bind), the token and the attempt up by one, no result
            if new.state = 'running'
               and new.owner_id is not null and length(new.owner_id) <= 200
               and new.fencing_token = old.fencing_token + 1 and new.attempt = old.attempt + 1
               and new.result is not distinct from old.result
               and (public.leasectl_worker_id_bound(new.owner_id) or not public.leasectl_binds_worker_identity()) then
                -- an attempt left (the claim asks the same), no cancel request on the chain (LCS13), the
                -- tool not paused (LCS15); in the same lookup, the tool's hold and whether a cap
                -- (the tool's or the agent's max_running, 0016) has to be counted
                select old.attempt < t.max_attempts + old.extra_attempts and t.paused_at is null
                       and not exists (select 1 from public.tool_jobs c
                                       where c.chain_id = new.chain_id and c.cancel_requested_at is not null),
                       t.max_hold_seconds,
                       t.max_running,
                       case when old.agent_id is not null
                            then (select a.max_running from public.agents a where a.id = old.agent_id) end
                  into v_fast, v_hold, v_tool_max, v_agent_max
                  from public.tools t where t.name = old.tool;
                if v_fast then
                    -- (0027) a capped call takes a slot of each cap here, as it is claimed (the claim
                    -- statement only passes over the caps full by its snapshot)
                    if v_tool_max is not null or v_agent_max is not null then
                        v_slots := public.leasectl_cap_slots_take(old.tool, v_tool_max, old.agent_id, v_agent_max, old.id);
                        if v_slots is null then
                            return null;  -- passed over, as the claim statement asked (see the function)
                        end if;
                        new.tool_slot := v_slots[1];
                        new.agent_slot := v_slots[2];
                    end if;
                    new.claimed_at := now();
                    -- (0016) no lease past the hold: claimed_at + tools.max_hold_seconds
                    new.hold_until := now() + v_hold * interval '1 second';
                    new.lease_until := least(new.lease_until, new.hold_until);
                    return new;
                end if;
            -- A completion by its owner under its token, with a result and nothing else, dated now
            -- (a running call is not cancel_requested, so completed_despite_cancel stays as it is)
            elsif new.state = 'succeeded'
               and new.owner_id is not distinct from old.owner_id and new.fencing_token = old.fencing_token
               and new.attempt = old.attempt and new.claimed_at is not distinct from old.claimed_at
               and now() >= old.created_at then
                new.finished_at := now();
                return new;
            end if;
        end if;

        -- (0014) the chain's rules
        -- (0015) nor its deadline, which a child takes from its parent (a worker that moved its call's
        -- deadline would move its lease's cap and its chain's)
        if new.parent_id is distinct from old.parent_id or new.chain_id <> old.chain_id or new.stage <> old.stage
           or new.accepted_at <> old.accepted_at or new.trace_id is distinct from old.trace_id
           or new.deadline_at is distinct from old.deadline_at then
            raise exception 'the chain, stage, acceptance time, deadline and trace of call % never change', old.id
                using errcode = 'LCS05';
        end if;

        -- a grant (claim or reclaim) or a return to the queue: not in a chain asked to stop
        if (new.state = 'running' and (old.state <> 'running' or new.fencing_token <> old.fencing_token))
           or (new.state = 'queued' and old.state <> 'queued') then
            -- judged on what is committed now: a worker's claim or requeue comes from a read committed
            -- transaction, within seconds of its start, even inside one long statement (LCS12)
            if public.leasectl_stale_worker_transaction() then
                raise exception 'call % is claimed or requeued from a read committed transaction of its own, not one begun at %',
                    old.id, now() using errcode = 'LCS12';
            end if;
            if public.leasectl_chain_cancelled(new.chain_id) then
                raise exception 'chain % of call % has a cancel request: none of its calls starts or is retried',
                    new.chain_id, old.id using errcode = 'LCS13';
            end if;
        end if;

        -- a cancel request stands: who asked, when and why are never rewritten or erased (0015: the
        -- who and the why too, which the control plane's login may write)
        if old.cancel_requested_at is not null
           and (new.cancel_requested_at, new.cancel_requested_by, new.cancel_requested_reason)
               is distinct from (old.cancel_requested_at, old.cancel_requested_by, old.cancel_requested_reason) then
            raise exception 'call % was asked to stop at %: the request stands', old.id, old.cancel_requested_at
                using errcode = 'LCS13';
        end if;

        -- a check: by the owner of a live lease, under its token, dated now
        if new.checked_at is distinct from old.checked_at or new.check_found is distinct from old.check_found
           or new.check_token is distinct from old.check_token or new.check_details is distinct from old.check_details then
            if new.check_found not in ('done', 'not_done', 'unknown') then
                raise exception 'a check finds done, not_done or unknown, not %', new.check_found
                    using errcode = 'check_violation', constraint = 'tool_jobs_check_found_check';
            end if;
            -- what the service said is journaled with the check: within 60 KiB, so that its journal
            -- row stays within the journal's 64 KiB. Measured as text: pg_column_size would count a
            -- value read from a table at its compressed size (5 MB of one letter measure 57 KB)
            if octet_length(new.check_details::text) > 61440 then
                raise exception 'what the service said stays within 60 KiB' using errcode = 'check_violation',
                    constraint = 'job_events_details_bounded';
            end if;
            if old.state not in ('running', 'cancel_requested') or old.lease_until is null or old.lease_until <= now()
               or new.owner_id is distinct from old.owner_id or new.fencing_token <> old.fencing_token
               or new.check_token is distinct from old.fencing_token or new.check_found is null then
                raise exception 'a check of call % is recorded by its owner, under its current token, while its lease is live',
                    old.id using errcode = 'LCS14';
            end if;
            if not public.leasectl_is_exempt() and public.leasectl_binds_worker_identity()
               and not public.leasectl_worker_id_bound(old.owner_id) then
                raise exception 'call % is not yours to check', old.id using errcode = 'LCS14';
            end if;
            if new.side_effect_started_at is distinct from old.side_effect_started_at then
                raise exception 'call %: a check and a start are two statements (the check is journaled first)', old.id
                    using errcode = 'LCS14';
            end if;
            new.checked_at := now();
            -- nobody can say whether it happened: a human decides, and the statement says so itself
            -- (the state is in its SET list, so the journal records the move: record_check.sql)
            if new.check_found = 'unknown' and (new.state <> 'outcome_unknown' or new.lease_until is not null) then
                raise exception 'call %: a check that found unknown moves the call to outcome_unknown with no lease, in the same statement',
                    old.id using errcode = 'LCS14';
            end if;
        end if;

        -- an unverifiable request is sent at most once without a human (docs/seeds.md §004.8): the
        -- approved retry clears the mark (leasectl_approve_retry), nothing else lets a second one out
        if new.side_effect_started_at is not null and old.side_effect_started_at is not null
           and new.side_effect_started_at is distinct from old.side_effect_started_at then
            select t.side_effect into v_side_effect from public.tools t where t.name = old.tool;
            if v_side_effect = 'mutating_unverifiable' then
                raise exception 'call % already sent its unverifiable request %: only a human''s approved retry sends another',
                    old.id, old.external_request_id using errcode = 'LCS07';
            end if;
        end if;
        -- a new start while an earlier request is on the call
        if new.side_effect_started_at is not null
           and new.side_effect_started_at is distinct from old.side_effect_started_at
           and (old.external_request_id is not null or old.side_effect_started_at is not null) then
            select t.side_effect into v_side_effect from public.tools t where t.name = old.tool;
            if v_side_effect = 'mutating_verifiable'
               and not coalesce(old.check_found = 'not_done' and old.check_token = old.fencing_token, false) then
                raise exception 'call % carries request %: ask the service first (worker/record_check.sql), then start again',
                    old.id, old.external_request_id using errcode = 'LCS14';
            end if;
        end if;
        -- a start sends a new request: the check that allowed it is spent (the journal keeps it)
        if new.side_effect_started_at is not null and new.side_effect_started_at is distinct from old.side_effect_started_at then
            new.check_found := null;
            new.check_token := null;
            new.checked_at := null;
            new.check_details := null;
        end if;

        -- (0013) the state's rules
        <<state_rules>>
        begin
            -- an upsert that found an existing key touches the row without changing it
            if new is not distinct from old then
                exit state_rules;
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
        end;

        -- (0015) the story's rules: the schema's owner (and the operator functions that run as it) is
        -- exempt, as from the queued rule above
        if not public.leasectl_is_exempt() then
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
        end if;

        -- (0016) fair share and bounded holds, for every login (the schema's owner too): a paused tool's
        -- calls are not started, a claim from the queue stays within the tool's and the agent's
        -- max_running (counted under the cap's lock), and every grant starts a hold that no lease
        -- outlives. The hold is the guard's to write.
        if new.state = 'running' and (old.state <> 'running' or new.fencing_token <> old.fencing_token) then
            select t.paused_at is not null, t.max_hold_seconds, t.max_running into v_paused, v_hold, v_tool_max
              from public.tools t where t.name = old.tool;
            if v_paused then
                raise exception 'tool % is paused: none of its calls starts until it is resumed (call %)', old.tool, old.id
                    using errcode = 'LCS15';
            end if;
            if old.state = 'queued' then
                -- (0027) a slot of each cap that applies, taken now, or none starts
                v_agent_max := (select a.max_running from public.agents a where a.id = old.agent_id);
                v_slots := array[null, null]::integer[];
                if v_tool_max is not null or v_agent_max is not null then
                    v_slots := public.leasectl_cap_slots_take(old.tool, v_tool_max, old.agent_id, v_agent_max, old.id);
                    if v_slots is null then
                        return null;  -- passed over, as the claim statement asked (see the function)
                    end if;
                end if;
                new.tool_slot := v_slots[1];
                new.agent_slot := v_slots[2];
            else
                -- a reclaim keeps the slots its call holds
                new.tool_slot := old.tool_slot;
                new.agent_slot := old.agent_slot;
            end if;
            new.hold_until := now() + v_hold * interval '1 second';
            new.lease_until := least(new.lease_until, new.hold_until);
        elsif new.hold_until is distinct from old.hold_until then
            raise exception 'the hold of call % is set by its claim, nothing else', old.id using errcode = 'LCS05';
        elsif new.tool_slot is distinct from old.tool_slot or new.agent_slot is distinct from old.agent_slot then
            raise exception 'the cap slots of call % are taken by its claim, nothing else', old.id using errcode = 'LCS05';
        end if;

        -- (0014) a verifiable request that went out and was never checked is not "not done": failed or
        -- cancelled becomes outcome_unknown. Last, once every rule above has judged the transition the
        -- client asked for: this only turns an ending into a human's question. An operator's
        -- mark-terminal is a human's decision on the record (journaled just before) and stands.
        if new.state in ('failed', 'cancelled') and old.state in ('queued', 'running', 'cancel_requested')
           and old.side_effect_started_at is not null then
            select t.side_effect into v_side_effect from public.tools t where t.name = old.tool;
            if v_side_effect = 'mutating_verifiable' and not coalesce(old.check_found = 'not_done', false)
               and not exists (select 1 from public.job_events e
                               where e.job_id = old.id and e.kind = 'operator_mark_terminal' and e.at = now()
                                 and e.state_to = new.state and e.details ->> 'outcome' = 'applied') then
                new.error := coalesce(new.error, '{}'::jsonb) || jsonb_build_object(
                    'unchecked_request', old.external_request_id,
                    'would_have_ended', new.state,
                    'because', coalesce(new.terminal_reason, 'no reason given'));
                new.state := 'outcome_unknown';
                new.finished_at := null;
                new.lease_until := null;
                new.terminal_reason := null;
            end if;
        end if;
    end if;

    -- (0015) bounds on what a new call or a change writes: every time finite (0013's
    -- tool_jobs_finite_times), a finish never before the call was made, a terminal reason within
    -- 2,000 characters, names within 200 (a request id 500). SQLSTATE 23514, as the checks they
    -- were. (The fast paths above write only now() and a bounded owner name.)
    if not (isfinite(new.created_at) and coalesce(isfinite(new.deadline_at), true)
            and coalesce(isfinite(new.claimed_at), true) and coalesce(isfinite(new.finished_at), true)
            and coalesce(isfinite(new.cancel_requested_at), true)
            and coalesce(isfinite(new.side_effect_started_at), true)
            and coalesce(isfinite(new.retry_approved_at), true)) then
        raise exception 'every time of call % is finite', new.id using errcode = 'check_violation',
            constraint = 'tool_jobs_finite_times';
    end if;
    if new.finished_at < new.created_at then
        raise exception 'call % finished at %, before it was made (%)', new.id, new.finished_at, new.created_at
            using errcode = 'check_violation', constraint = 'tool_jobs_finished_after_made';
    end if;
    if length(new.terminal_reason) > 2000 then
        raise exception 'the terminal reason of call % is longer than 2,000 characters', new.id
            using errcode = 'check_violation', constraint = 'tool_jobs_terminal_reason_bounded';
    end if;
    -- (the model and provider are metric labels, and the names of who asked for a cancel and why
    -- are shown to every operator: a ninth walk wrote a megabyte into each)
    if length(new.owner_id) > 200 or length(new.agent_id) > 200 or length(new.session_id) > 200
       or length(new.model) > 200 or length(new.provider) > 200 or length(new.cancel_requested_by) > 200
       or length(new.external_request_id) > 500 then
        raise exception 'a call''s agent, session, owner, model and provider names stay within 200 characters, a request id within 500'
            using errcode = 'check_violation', constraint = 'tool_jobs_names_bounded';
    end if;
    if length(new.cancel_requested_reason) > 1000 then
        raise exception 'the reason of a cancel request stays within 1,000 characters, as every reason'
            using errcode = 'check_violation', constraint = 'tool_jobs_reason_bounded';
    end if;
    return new;
end $$;

drop trigger tool_jobs_guard_update on public.tool_jobs;
create trigger tool_jobs_guard_update
    before update of state, owner_id, fencing_token, idempotency_key, tool, id, created_at,
                     retry_approved_by, payload, attempt, finished_at, parent_id, chain_id, stage,
                     accepted_at, trace_id, cancel_requested_at, side_effect_started_at, checked_at,
                     check_found, check_token, check_details, completed_despite_cancel, terminal_reason,
                     claimed_at, result, external_request_id, error, agent_id, session_id,
                     deadline_at, retry_approved_at, cancel_requested_by, cancel_requested_reason, hold_until,
                     tool_slot, agent_slot
    on public.tool_jobs
    for each row
    execute function public.leasectl_tool_jobs_guard();

insert into leasectl_migrations (version, name) values (27, '0027_cap_slot_on_call')
on conflict (version) do nothing;
