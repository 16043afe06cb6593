-- 0014: chains and deadlines (docs/seeds.md §000 stages, §004 deadlines and outcomes;
-- docs/contract.md §2). Every rule here holds for any SQL a client sends:
--
--   chains            tool_jobs.parent_id, chain_id, stage: a call made by another belongs to its
--                     chain, one stage further. The database sets chain_id and stage (a client's
--                     values are overwritten), and a child's deadline is the earlier of the one
--                     asked for and its parent's. A child of a parent that is not running or
--                     succeeded, or of a chain with a cancel request, is refused (LCS13).
--   a cancel reaches  once any call of a chain has a cancel request, none of its calls is
--   the chain         claimed, reclaimed or requeued again (LCS13): no later stage, no retry.
--   deadlines bound   a lease never runs past the call's deadline (check constraint
--   leases            tool_jobs_lease_within_deadline, since 0015 part of tool_jobs_lease_bounded:
--                     claim and heartbeat cap it; a hand-written
--                     renewal past it is refused, 23514). tools.min_time_left_seconds: a call
--                     with less time left than that is not started (claim.sql; the sweep ends it
--                     saying so).
--   checks before     a mutating_verifiable call that carries an earlier external request starts
--   repeats           no new one until its owner recorded, under its current token and after the
--                     last start, that the service says not_done (worker/record_check.sql;
--                     LCS14); `unknown` sends it to outcome_unknown. Such a call whose request
--                     went out never ends failed or cancelled without that check: it goes to
--                     outcome_unknown and waits for a human (an operator's mark-terminal, a
--                     human decision on the record, stands).
--   upstream facts    accepted_at (when the request was accepted upstream, never in the
--                     future), priority, trace_id (W3C, 32 hex digits); tools.service.
--
-- Heartbeats still fire no trigger and stay HOT: the new indexes are on columns a heartbeat
-- never writes, and the new triggers fire only on the columns they judge.

-- ---------------------------------------------------------------------------------------
-- Columns. Existing calls become chains of one (chain_id = id, stage 0, accepted when created).

alter table public.tools
    add column min_time_left_seconds numeric not null default 0 check (min_time_left_seconds >= 0),
    add column service text;

comment on column public.tools.min_time_left_seconds is
    'a call with less time than this left before its deadline is not started (nor retried)';
comment on column public.tools.service is 'the external service the tool calls (a metrics grouping)';

-- Their rules are the guards', not CHECK constraints: a CHECK is prepared again for every
-- statement that writes the table (each claim, completion and heartbeat), a guard's tests once per
-- session, and they run only when a column they judge is written. The chain and stage are set by
-- tool_jobs_chain_insert and never change; a trace id is judged there; a check by the one guard of
-- every change (migrations/0015_trust_third_walk.sql).
alter table public.tool_jobs
    add column parent_id uuid,
    add column chain_id uuid,
    add column stage integer not null default 0,
    add column priority smallint not null default 0,
    add column accepted_at timestamptz,
    add column trace_id text,
    -- (finite, as every time of a call: 0013's tool_jobs_finite_times)
    add column checked_at timestamptz,
    add column check_found text,
    add column check_token bigint,
    add column check_details jsonb;

-- The backfill writes only the new columns, the call's own facts: the guard that refuses any
-- change to a finished call (tool_jobs_guard_settled) is off for this one statement.
alter table public.tool_jobs disable trigger tool_jobs_guard_settled;
update public.tool_jobs set chain_id = id, accepted_at = created_at where chain_id is null;
alter table public.tool_jobs enable trigger tool_jobs_guard_settled;
alter table public.tool_jobs
    alter column chain_id set not null,
    alter column accepted_at set not null,
    alter column accepted_at set default now();

-- A chain is its first call (id = chain_id, stage 0: the primary key finds it) and its later
-- stages, which only this index holds (most calls are chains of one, so it stays small, and the
-- claim and the completion of a lone call, both non-HOT updates, add nothing to it): where the
-- Chains screen finds chains and a chain's story its calls (queries/views/chain.sql).
create index tool_jobs_later_stages on public.tool_jobs (chain_id, stage) where stage > 0;
-- small: only calls that were ever asked to stop; what "does this chain have a cancel?" reads
create index tool_jobs_chain_cancelled on public.tool_jobs (chain_id) where cancel_requested_at is not null;

-- No lease outlives its deadline. Leases granted before this migration are capped first.
update public.tool_jobs set lease_until = deadline_at where lease_until > deadline_at;
alter table public.tool_jobs
    add constraint tool_jobs_lease_within_deadline check (lease_until <= deadline_at) not valid;
alter table public.tool_jobs validate constraint tool_jobs_lease_within_deadline;

-- ---------------------------------------------------------------------------------------
-- Chain lookups. No lock is taken between a child being enqueued and a cancel landing on its
-- chain (a lock any login could hold would let it stall cancels and drains): a child that slips
-- in as the cancel commits is never claimed (the claim and the grant rule below read the cancel)
-- and the sweep cancels it. A worker's claim and child come from read committed transactions of
-- their own (LCS12), so they always read the latest cancel.

create function public.leasectl_chain_cancelled(p_chain_id uuid) returns boolean
language sql stable set search_path = pg_catalog, public, pg_temp as $$
    select exists (select 1 from public.tool_jobs c
                   where c.chain_id = p_chain_id and c.cancel_requested_at is not null)
$$;

-- A worker's session that would judge on an old picture: a transaction that is not read committed
-- (its snapshot misses what committed since it began), or one older than 2 s at this instant (a
-- statement that slept: the rules' now() is its start).
create function public.leasectl_stale_worker_transaction() returns boolean
language sql volatile set search_path = pg_catalog, public, pg_temp as $$
    -- the session's login, not current_user: enqueue runs as the schema's owner
    select public.leasectl_is_worker_login()
       and (current_setting('transaction_isolation') <> 'read committed'
            or clock_timestamp() > now() + interval '2 seconds')
$$;

-- The parent's chain, stage, deadline and state.
create function public.leasectl_chain_parent(p_parent_id uuid)
returns table (chain_id uuid, stage integer, deadline_at timestamptz, state text, owner_id text)
language sql stable set search_path = pg_catalog, public, pg_temp as $$
    select j.chain_id, j.stage, j.deadline_at, j.state, j.owner_id from public.tool_jobs j where j.id = p_parent_id
$$;

-- ---------------------------------------------------------------------------------------
-- A new call: its chain, its stage, its deadline, its acceptance time.

create function public.leasectl_chain_insert() returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
declare
    p record;
begin
    -- a worker's call is made now, from a fresh read committed transaction (LCS12): one opened early
    -- would date it before what happened since (a drain, a cancel, calls enqueued before it)
    if public.leasectl_stale_worker_transaction() then
        raise exception 'a call is enqueued from a read committed transaction of its own, not one begun at %', now()
            using errcode = 'LCS12';
    end if;
    -- accepted upstream, never later than now nor more than a day before: a future time would hide
    -- a queue wait, an ancient one would break every wait computed from it
    new.accepted_at := greatest(least(coalesce(new.accepted_at, now()), now()), now() - interval '1 day');
    -- a W3C trace id (trace-context: 32 lowercase hex digits, not all zero), or none
    if new.trace_id !~ '^[0-9a-f]{32}$' or new.trace_id = repeat('0', 32) then
        raise exception 'trace id % is not a W3C trace id (32 lowercase hex digits, not all zero)', new.trace_id
            using errcode = 'check_violation', constraint = 'tool_jobs_trace_id_check';
    end if;
    -- nobody's decision comes with a new call
    new.retry_approved_reason := null;
    new.cancel_requested_reason := null;
    -- a check is its owner's, recorded by record_check.sql on a running call: never born with one
    new.checked_at := null;
    new.check_found := null;
    new.check_token := null;
    new.check_details := null;
    if new.parent_id is null then
        new.chain_id := new.id;
        new.stage := 0;
        return new;
    end if;
    select * into p from public.leasectl_chain_parent(new.parent_id);
    if not found then
        raise exception 'parent call % does not exist', new.parent_id using errcode = 'LCS13';
    end if;
    -- a worker login makes the next stage of a call it holds, nobody else's (a guessed key would hand
    -- the owner another login's call as its next stage)
    if public.leasectl_is_worker_login() and not public.leasectl_worker_id_bound(p.owner_id) then
        raise exception 'call % is not yours: login % may not make its next stage', new.parent_id, session_user
            using errcode = 'LCS13';
    end if;
    if p.state not in ('running', 'succeeded') then
        raise exception 'parent call % is %: it makes no new call', new.parent_id, p.state using errcode = 'LCS13';
    end if;
    if public.leasectl_chain_cancelled(p.chain_id) then
        raise exception 'chain % has a cancel request: no later stage starts', p.chain_id using errcode = 'LCS13';
    end if;
    new.chain_id := p.chain_id;
    new.stage := p.stage + 1;
    new.deadline_at := least(new.deadline_at, p.deadline_at);  -- least() passes over a null
    return new;
end $$;

create trigger tool_jobs_chain_insert
    before insert on public.tool_jobs
    for each row
    execute function public.leasectl_chain_insert();

-- ---------------------------------------------------------------------------------------
-- A change: chain membership never changes; a cancelled chain starts nothing again; a check is
-- its owner's, now; a verifiable request is checked before it is repeated; a verifiable request
-- that went out and was never checked does not end failed or cancelled (outcome_unknown). These
-- rules are in the one guard of every change, leasectl_tool_jobs_guard, with the state's rules
-- (migrations/0015_trust_third_walk.sql).

-- ---------------------------------------------------------------------------------------
-- The check's journal row, and nobody else's: side_effect_checked is the database's kind (the
-- journal's guard refuses it from anyone else: migrations/0015_trust_third_walk.sql).

create function public.leasectl_journal_check() returns trigger
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
begin
    insert into public.job_events (job_id, at, kind, actor, fencing_token, state_from, state_to,
                                   owner_from, owner_to, lease_until, details)
    values (new.id, now(), 'side_effect_checked', new.owner_id, new.check_token, old.state, new.state,
            new.owner_id, new.owner_id, new.lease_until,
            jsonb_strip_nulls(jsonb_build_object('found', new.check_found,
                                                 'external_request_id', old.external_request_id,
                                                 'details', new.check_details)));
    return null;
end $$;

-- any of the check's columns named in a statement (checked_at is stamped by the guard, not named)
create trigger tool_jobs_journal_check
    after update of checked_at, check_found, check_token, check_details on public.tool_jobs
    for each row
    -- any change of the check, even two in one transaction (checked_at is the same now() in both)
    when ((new.checked_at, new.check_found, new.check_token, new.check_details)
          is distinct from (old.checked_at, old.check_found, old.check_token, old.check_details)
          and new.check_found is not null)
    execute function public.leasectl_journal_check();

-- ---------------------------------------------------------------------------------------
-- Enqueue with the chain's parameters; the eight-parameter form stays for workers not upgraded.
-- A refused child (parent not running or succeeded, chain cancelled) is zero rows, not an error.

create function public.leasectl_enqueue(p_tool text, p_idempotency_key text, p_payload jsonb, p_agent_id text,
                                        p_session_id text, p_deadline_at timestamptz, p_model text,
                                        p_provider text, p_parent_id uuid, p_priority smallint,
                                        p_accepted_at timestamptz, p_trace_id text)
returns table (id uuid, state text, fencing_token bigint, tool text, payload_hash text, created boolean)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
#variable_conflict use_column
declare
    p record;
begin
    if p_parent_id is not null then
        select * into p from public.leasectl_chain_parent(p_parent_id);
        if not found or p.state not in ('running', 'succeeded') or public.leasectl_chain_cancelled(p.chain_id) then
            -- the same key enqueued before the refusal is still that call
            return query select j.id, j.state, j.fencing_token, j.tool, j.payload_hash, false
                         from public.tool_jobs j where j.idempotency_key = p_idempotency_key;
            return;
        end if;
    end if;
    return query
    with agent as (
        select a.state from public.agents a where a.id = p_agent_id for share
    )
    insert into public.tool_jobs as j (tool, idempotency_key, payload, agent_id, session_id,
                                       deadline_at, model, provider, parent_id, priority, accepted_at,
                                       trace_id)
    select p_tool, p_idempotency_key, p_payload, p_agent_id, p_session_id, p_deadline_at, p_model,
           p_provider, p_parent_id, coalesce(p_priority, 0), coalesce(p_accepted_at, now()), p_trace_id
    where not exists (select 1 from agent where agent.state <> 'running')
    on conflict (idempotency_key) do update set idempotency_key = excluded.idempotency_key
    returning j.id, j.state, j.fencing_token, j.tool, j.payload_hash, (j.xmax = 0);
end $$;

revoke all on function public.leasectl_enqueue(text, text, jsonb, text, text, timestamptz, text, text, uuid,
                                               smallint, timestamptz, text) from public;

-- ---------------------------------------------------------------------------------------
-- Lease health: a running call past its deadline is `past_deadline` (before lease_expired: its
-- lease ended with the deadline, and no retry will start).

create function public.leasectl_job_health(
    p_state text, p_lease_until timestamptz, p_heartbeat_at timestamptz,
    p_cancel_requested_at timestamptz, p_claimed_at timestamptz,
    p_late_before timestamptz, p_unheard_before timestamptz, p_stage_before timestamptz,
    p_recent_rejection boolean, p_now timestamptz, p_deadline_at timestamptz
) returns text
language sql immutable parallel safe as $$
    select case
        when p_state operator(pg_catalog.=) 'running' or p_state operator(pg_catalog.=) 'cancel_requested' then
            case when p_deadline_at operator(pg_catalog.<=) p_now then 'past_deadline'
                 else public.leasectl_job_health(p_state, p_lease_until, p_heartbeat_at, p_cancel_requested_at,
                                                 p_claimed_at, p_late_before, p_unheard_before, p_stage_before,
                                                 p_recent_rejection, p_now) end
        else public.leasectl_job_health(p_state, p_lease_until, p_heartbeat_at, p_cancel_requested_at,
                                        p_claimed_at, p_late_before, p_unheard_before, p_stage_before,
                                        p_recent_rejection, p_now) end
$$;

create or replace function public.leasectl_health_rank(p_health text) returns integer
language sql immutable parallel safe as $$
    select case p_health
        when 'outcome_unknown' then 0 when 'past_deadline' then 1 when 'lease_expired' then 1
        when 'cancel_unheard' then 2 when 'zombie' then 3 when 'heartbeat_late' then 4
        when 'over_stage_timeout' then 5
        else 9 end
$$;

-- ---------------------------------------------------------------------------------------
-- Who may write the new columns: a worker its checks (the guard above says when); nobody the
-- chain's facts, which the database sets.

do $$
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_worker') then
        grant update (checked_at, check_found, check_token, check_details) on public.tool_jobs to leasectl_worker;
        grant execute on function public.leasectl_enqueue(text, text, jsonb, text, text, timestamptz, text, text,
                                                          uuid, smallint, timestamptz, text) to leasectl_worker;
    end if;
    -- run as the role the guards recognise (the tables' owner), as 0005's functions do
    if (select proowner from pg_catalog.pg_proc
        where oid = 'public.leasectl_enqueue(text, text, jsonb, text, text, timestamptz, text, text, uuid, smallint, timestamptz, text)'::regprocedure)
       <> (select relowner from pg_catalog.pg_class where oid = 'public.job_events'::regclass) then
        begin
            execute format('alter function public.leasectl_enqueue(text, text, jsonb, text, text, timestamptz, text, text, uuid, smallint, timestamptz, text) owner to %I',
                           public.leasectl_schema_owner());
            execute format('alter function public.leasectl_journal_check() owner to %I', public.leasectl_schema_owner());
        exception
            when insufficient_privilege then
                raise notice 'leasectl: % may not give the chain functions to %', current_user,
                    public.leasectl_schema_owner();
        end;
    end if;
end $$;

insert into leasectl_migrations (version, name) values (14, '0014_chains')
on conflict (version) do nothing;
