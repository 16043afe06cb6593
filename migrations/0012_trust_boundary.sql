-- 0012: the trust boundary, again. Three ways a leasectl_worker login still got past the
-- database's rules, and the rules that close each as a class.
--
-- 1. Temporary objects shadowed what the guards read. PostgreSQL searches the session's temporary
--    schema *first* for relations and types unless search_path names pg_temp explicitly
--    ("Writing SECURITY DEFINER Functions Safely", PostgreSQL docs), and every login may create
--    temporary tables by default. The guards ran with `search_path = pg_catalog, public` and read
--    some tables unqualified, so `create temp table tools (...)` calling a payment read_only let
--    its owner requeue it after the request went out (LCS07 skipped), and a temporary pg_class or
--    pg_roles made a worker "the schema owner" to the kind guard and the exemption test (forged
--    claims, approvals, heartbeat_lost in another's name). From here on, every SECURITY DEFINER
--    function, every trigger function and every function that reads a table or a catalog runs
--    with `search_path = pg_catalog, public, pg_temp` (pg_temp last) *and* names every relation
--    and every leasectl function with its schema: either alone would do, both are what the docs
--    prescribe. The functions below are the current definitions of all of them, unchanged but for
--    that and what 2 and 3 add (marked 0012). tests/db/test_search_path.py lists every function of
--    the schema from pg_proc and holds each to the rule; tests/db/test_shadows.py creates a
--    lying temporary shadow of every table and catalog a guard reads, as each login, and replays
--    every refusal the suite knows.
--    Left without the setting, on purpose: plain SQL functions that read nothing
--    (leasectl_worker_id_bound, the health rules, the JSON writers, the metric buckets, the clock):
--    a SET clause stops PostgreSQL inlining a function, and leasectl_worker_id_bound is inlined
--    into the row level security policy every heartbeat evaluates. Inlined, a body is parsed under
--    the caller's search_path, so leasectl_worker_id_bound names its operators and types with
--    their schema too (a temporary table named `text` is also a type named `text`).
--
-- 2. Revocation by a written name. Any worker could revoke any agent's grant by writing an
--    ancestor's name into revoked_by. An agent now records the login that registered it
--    (agents.owner_role, set by the database), and a grant is revoked only by the control plane
--    (a session that may write reconciliation records: leasectl_supervisor, the schema owner) or
--    by the login that registered an ancestor of its holder, in that ancestor's name. revoked_by
--    is recorded, never trusted: it must name the control plane or such an ancestor (LCF04).
--    Agents registered before 0012 take their owner from the fleet journal's agent_registered row
--    where one recorded a db_role (0005 and later); the others have none, and only the control
--    plane revokes below them.
--
-- 3. Drain by a plain INSERT. A draining, aborting, reconciling or terminated agent got no call
--    through worker/enqueue.sql and worker/claim.sql, but a plain INSERT or a hand-written claim
--    UPDATE still gave it one. The state guard now refuses both, for any SQL (LCF07).
--
-- New SQLSTATE: LCF07 new work for an agent that is not running (an insert, a claim, a reclaim).
--
-- What 0012 does not do: revoke TEMPORARY on the database. Nothing of leasectl's rests on it any
-- more, and it is granted to PUBLIC, so taking it from the worker and operator groups alone is
-- impossible; taking it from PUBLIC would break any other application that shares the database.
-- `leasectl doctor` says whether it is granted and how to take it away; the reference worker uses
-- no temporary table, so a deployment that does loses nothing.
--
-- Runnable with `psql -v ON_ERROR_STOP=1 -f` and by `leasectl migrate`.

-- ---------------------------------------------------------------------------------------
-- 2. agents.owner_role: the login that registered the agent.
alter table public.agents add column owner_role text;

comment on column public.agents.owner_role is
    'The database login that registered the agent (set by the database): it may revoke the grants of the agent''s descendants';

-- from the fleet journal, where it recorded who registered the agent; the rest stay unowned
update public.agents a
set owner_role = e.db_role
from (select distinct on (f.agent_id) f.agent_id, f.db_role
      from public.fleet_events f
      where f.kind = 'agent_registered' and f.db_role is not null
      order by f.agent_id, f.id) e
where e.agent_id = a.id;

alter table public.agents alter column owner_role set default session_user;

-- The control plane: a session that may write reconciliation records (leasectl_supervisor, the
-- schema owner, a superuser). One definition for revocation and registration.
create function public.leasectl_is_control_plane() returns boolean
language sql stable as $$
    select pg_catalog.has_table_privilege('public.reconciliation_records', 'INSERT')
$$;

-- An agent's owner is whoever registers it: a login cannot register an agent in another login's
-- name (and so speak for its subtree). The control plane may register one for a login. The WHEN
-- clause leaves the common case, a login registering in its own name, free of plpgsql.
create function public.leasectl_agents_owner_stamp() returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    if new.owner_role is null or not public.leasectl_is_control_plane() then
        new.owner_role := session_user;
    end if;
    return new;
end $$;

create trigger agents_owner_stamp
    before insert on public.agents
    for each row when (new.owner_role is distinct from session_user)
    execute function public.leasectl_agents_owner_stamp();

-- ---------------------------------------------------------------------------------------
-- 1. What the guards read, each under the safe search_path and with qualified names.

create or replace function public.leasectl_is_exempt()
returns boolean
language plpgsql stable set search_path = pg_catalog, public, pg_temp as $$
begin
    return current_user = public.leasectl_schema_owner()
        or current_setting('is_superuser') = 'on'
        or exists (select 1 from pg_catalog.pg_class c join pg_catalog.pg_roles r on r.oid = c.relowner
                   where c.oid = 'public.job_events'::regclass and r.rolname = current_user);
end $$;

create or replace function public.leasectl_subtree(p_root text)
returns table (agent_id text, depth integer)
language sql stable set search_path = pg_catalog, public, pg_temp as $$
    with recursive tree as (
        select id, 0 as depth from public.agents where id = p_root
        union all
        select a.id, t.depth + 1 from public.agents a join tree t on a.parent_id = t.id
    )
    select id, depth from tree
$$;

create or replace function public.leasectl_is_ancestor(p_candidate text, p_agent text)
returns boolean
language sql stable set search_path = pg_catalog, public, pg_temp as $$
    with recursive up as (
        select parent_id from public.agents where id = p_agent
        union all
        select a.parent_id from public.agents a join up on a.id = up.parent_id where up.parent_id is not null
    )
    select exists (select 1 from up where parent_id = p_candidate)
$$;

-- (0012) May this session revoke a grant held by p_agent, in the name p_revoker? The control plane
-- may revoke any grant, as itself or in an ancestor's name; a login only in the name of an
-- ancestor of the holder that it registered itself. Used by the grants guard (which refuses) and
-- by queries/supervisor/revoke_grant.sql (which answers zero rows).
create function public.leasectl_may_revoke(p_agent text, p_revoker text) returns boolean
language sql stable set search_path = pg_catalog, public, pg_temp as $$
    select case
        when p_revoker = 'control-plane' then public.leasectl_is_control_plane()
        when not public.leasectl_is_ancestor(p_revoker, p_agent) then false
        else public.leasectl_is_control_plane()
             or exists (select 1 from public.agents a where a.id = p_revoker and a.owner_role = session_user)
    end
$$;

create or replace function public.leasectl_tool_cutoffs(p_now timestamp with time zone)
returns table (tool text, late_before timestamp with time zone, unheard_before timestamp with time zone, stage_before timestamp with time zone)
language sql stable parallel safe rows 20 set search_path = pg_catalog, public, pg_temp as $$
    select name,
           p_now - (heartbeat_seconds + jitter_seconds) * interval '1 second',
           p_now - (2 * heartbeat_seconds + jitter_seconds) * interval '1 second',
           p_now - stage_timeout_seconds * interval '1 second'
    from public.tools
$$;

create or replace function public.leasectl_recently_rejected(p_job_id uuid, p_now timestamp with time zone)
returns boolean
language sql stable parallel safe set search_path = pg_catalog, public, pg_temp as $$
    select exists (
        select 1 from public.job_events e
        where e.job_id = p_job_id
          and e.kind in ('heartbeat_lost', 'result_rejected', 'receiver_rejected')
          and e.at > p_now - interval '5 minutes')
$$;

create or replace function public.leasectl_metric_events(p_after bigint, p_through bigint, p_since timestamp with time zone, p_until timestamp with time zone)
returns table (event_id bigint, job_id uuid, at timestamp with time zone, metric text, seconds double precision, tool text, model text, provider text)
language sql stable parallel safe set search_path = pg_catalog, public, pg_temp as $$
    select e.id, e.job_id, e.at, k.metric,
           case k.metric
               when 'queue_wait' then greatest(0, extract(epoch from e.at - coalesce(
                   case when e.details ->> 'attempt' = '1' then j.created_at end,
                   (select max(p.at) from public.job_events p
                    where p.job_id = e.job_id and p.at <= e.at and p.id <> e.id and p.state_to = 'queued'
                      and p.kind in ('enqueued', 'state_changed')),
                   j.created_at)))
               when 'start_confirm' then greatest(0, extract(epoch from e.at - coalesce(
                   case when j.fencing_token = e.fencing_token then j.claimed_at end,
                   (select max(p.at) from public.job_events p
                    where p.job_id = e.job_id and p.at <= e.at and p.id <> e.id
                      and p.kind in ('claimed', 'reclaimed')
                      and p.fencing_token = e.fencing_token))))
           end::float8,  -- null for a counted event
           j.tool, j.model, j.provider
    from public.job_events e
    cross join lateral (
        select case
            when e.kind = 'heartbeat_lost' then 'renewal_failures'
            when e.kind in ('result_rejected', 'receiver_rejected') then 'stale_writes_rejected'
            when e.kind = 'reclaimed' then 'reclaims'
            when e.kind = 'state_changed' and e.state_from = 'running' and e.state_to = 'queued'
                 and (e.details ->> 'previous_lease_until')::timestamptz < e.at then 'reclaims'
            when e.kind = 'state_changed' and e.state_to = 'outcome_unknown'
                 and e.state_from is distinct from 'outcome_unknown' then 'outcome_unknown_entered'
            when e.kind = 'state_changed' and e.state_from = 'outcome_unknown'
                 and e.state_to is distinct from 'outcome_unknown' then 'outcome_unknown_left'
            when e.kind in ('database_error', 'operator_action_failed')
                 and e.details ->> 'cause' = 'lock_timeout' then 'lock_timeouts'
            when e.kind in ('database_error', 'operator_action_failed')
                 and e.details ->> 'cause' = 'statement_timeout' then 'statement_timeouts'
            when e.kind = 'claimed' then 'queue_wait'
            when e.kind in ('tool_request_started', 'side_effect_started') then 'start_confirm'
        end as metric
    ) k
    left join public.tool_jobs j on j.id = e.job_id
    where e.id > p_after and e.id <= p_through
      and e.at > p_since and e.at <= p_until
      -- the predicate of job_events_metrics_idx, word for word (the planner matches it)
      and (e.kind in ('heartbeat_lost', 'result_rejected', 'receiver_rejected', 'reclaimed', 'database_error',
                      'operator_action_failed', 'claimed', 'tool_request_started', 'side_effect_started')
           or (e.kind = 'state_changed'
               and (e.state_from = 'outcome_unknown' or e.state_to in ('queued', 'outcome_unknown'))))
      and k.metric is not null
$$;

create or replace function public.leasectl_operator_journal(p_kind text, p_job_id uuid, p_actor text, p_fencing_token bigint, p_state_from text, p_state_to text, p_owner_from text, p_owner_to text, p_reason text, p_details jsonb, p_request_id uuid DEFAULT NULL::uuid)
returns public.job_events
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
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
    perform pg_catalog.pg_notify('leasectl_jobs',
                                 pg_catalog.json_build_object('id', v_row.job_id, 'kind', v_row.kind)::text);
    return v_row;
end $$;


-- ---------------------------------------------------------------------------------------
-- The guards: triggers no client can skip.

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
            select a.state into v_agent_state from public.agents a where a.id = new.agent_id for share;
            if v_agent_state <> 'running' then
                raise exception 'agent % is %: it gets no new call', new.agent_id, v_agent_state
                    using errcode = 'LCF07';
            end if;
        end if;
        new.payload_hash := encode(sha256(convert_to(new.payload::text, 'UTF8')), 'hex');
        return new;
    end if;

    -- (0012) ... and none of its calls is claimed or reclaimed (worker/claim.sql skips them; this
    -- refuses a claim written by hand). A claim that committed before the shutdown began is an
    -- in-flight call like any other: the shutdown finishes or cancels it and records it.
    if new.state = 'running' and new.agent_id is not null
       and (old.state <> 'running' or new.fencing_token <> old.fencing_token) then
        select a.state into v_agent_state from public.agents a where a.id = new.agent_id;
        if v_agent_state <> 'running' then
            raise exception 'agent % is %: it takes no call (call %)', new.agent_id, v_agent_state, old.id
                using errcode = 'LCF07';
        end if;
    end if;

    -- NEW (0009): the two transitions every call makes, accepted in one expression each when
    -- they are exactly what the rules below accept unchanged.
    -- A claim: queued -> running, a new owner that is this login's own (or a session the
    -- identity rule does not bind), a higher token, nothing immutable touched. The rules below
    -- would pass it through LCS10 (not queued -> queued), LCS03, LCS05, LCS02, LCS01 (a legal
    -- transition), LCS08 (bound or not binding), the grant rules (an owner, a higher token, no
    -- live lease and no started side effect to look at: it was queued) and return it as it is.
    if old.state = 'queued' and new.state = 'running'
       and new.owner_id is not null and new.fencing_token > old.fencing_token
       and new.id = old.id and new.idempotency_key = old.idempotency_key and new.tool = old.tool
       and new.payload is not distinct from old.payload and new.created_at = old.created_at
       and (public.leasectl_worker_id_bound(new.owner_id) or not public.leasectl_binds_worker_identity()) then
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

    if old.state = 'cancel_requested' and new.state = 'succeeded' then
        new.completed_despite_cancel := true;
    end if;
    if new.state in ('succeeded', 'failed', 'cancelled') then
        new.finished_at := coalesce(new.finished_at, now());
    end if;
    return new;
end $$;

create or replace function public.leasectl_tool_jobs_side_effect_guard()
returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    if old.side_effect_started_at is not null and new.side_effect_started_at is null then
        if old.state = 'outcome_unknown' and new.state = 'queued' then
            -- the approved retry: the state guard (tool_jobs_guard_update, after this trigger) refuses
            -- it unless a human approved it (LCS04, LCS09)
            if new.external_request_id is distinct from old.external_request_id then
                raise exception 'call %: an approved retry keeps the external request id', old.id
                    using errcode = 'LCS07';
            end if;
            return new;
        end if;
        raise exception 'call % started a side effect at %: the mark is kept (only a human''s approved retry clears it)',
            old.id, old.side_effect_started_at using errcode = 'LCS07';
    end if;
    if new.side_effect_started_at < old.side_effect_started_at then
        raise exception 'call %: the side effect''s start cannot move back in time (% -> %)',
            old.id, old.side_effect_started_at, new.side_effect_started_at using errcode = 'LCS07';
    end if;
    if new.external_request_id is distinct from old.external_request_id
       and new.side_effect_started_at is not distinct from old.side_effect_started_at then
        raise exception 'call %: the external request id changes only with a new start (start_side_effect.sql)',
            old.id using errcode = 'LCS07';
    end if;
    return new;
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

create or replace function public.leasectl_job_events_append_only()
returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    raise exception 'job_events is append-only: % is refused', tg_op using errcode = 'LCH01';
end $$;

create or replace function public.leasectl_agents_guard()
returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
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
    end if;
    if new.agent_id <> old.agent_id or new.kind <> old.kind or new.resource <> old.resource
       or new.issued_by <> old.issued_by or new.issued_at <> old.issued_at then
        raise exception 'a grant is revoked or left alone, never rewritten' using errcode = 'LCF04';
    end if;
    return new;
end $$;

create or replace function public.leasectl_shutdowns_guard()
returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    if tg_op = 'INSERT' then
        if new.state <> 'requested' then
            raise exception 'a shutdown starts requested' using errcode = 'LCF02';
        end if;
        if exists (select 1 from public.leasectl_subtree(new.root_agent_id) s where s.agent_id = new.requested_by) then
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

create or replace function public.leasectl_fleet_events_stamp()
returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    new.db_role := session_user;
    return new;
end $$;

create or replace function public.leasectl_fleet_append_only()
returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    raise exception '% is append-only: % is refused', tg_table_name, tg_op using errcode = 'LCF06';
end $$;

create or replace function public.leasectl_metric_totals_only_grow()
returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    if tg_op = 'UPDATE' and new.n >= old.n and new.seconds >= old.seconds
       and (new.metric, new.tool, new.model, new.provider, new.le)
           = (old.metric, old.tool, old.model, old.provider, old.le) then
        return new;
    end if;
    raise exception 'leasectl_metric_totals only grow: % is refused', tg_op using errcode = 'LCH01';
end $$;


-- ---------------------------------------------------------------------------------------
-- SECURITY DEFINER: the statements that run as the schema owner (the journal, the operator
-- actions, enqueue's upsert, the metric fold).

create or replace function public.leasectl_autoregister_tool()
returns trigger
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
begin
    insert into public.tools (name, side_effect, lease_seconds, heartbeat_seconds,
                              missed_heartbeats, jitter_seconds, description, auto_registered)
    values (new.tool, 'mutating_unverifiable', 90, 30, 1, 20,
            'registered automatically on first use; side-effect class unknown, treated as unverifiable',
            true)
    on conflict (name) do nothing;
    return new;
end $$;

create or replace function public.leasectl_enqueue(p_tool text, p_idempotency_key text, p_payload jsonb, p_agent_id text, p_session_id text, p_deadline_at timestamp with time zone, p_model text, p_provider text)
returns table (id uuid, state text, fencing_token bigint, tool text, payload_hash text, created boolean)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
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

create or replace function public.leasectl_fleet_journal()
returns trigger
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
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

create or replace function public.leasectl_request_cancel(p_job_id uuid, p_seen_state text, p_seen_token bigint, p_operator text, p_reason text)
returns table (job_id uuid, state text, fencing_token bigint, owner_id text, lease_until timestamp with time zone, cancel_requested_at timestamp with time zone, request_id uuid)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
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

create or replace function public.leasectl_mark_terminal(p_job_id uuid, p_seen_state text, p_seen_token bigint, p_terminal_state text, p_operator text, p_reason text, p_force boolean)
returns table (job_id uuid, state text, fencing_token bigint, owner_id text, fenced boolean, finished_at timestamp with time zone, request_id uuid)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
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

create or replace function public.leasectl_approve_retry(p_job_id uuid, p_seen_state text, p_seen_token bigint, p_operator text, p_reason text)
returns table (job_id uuid, state text, fencing_token bigint, retry_approved_at timestamp with time zone, request_id uuid)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
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

create or replace function public.leasectl_journal_failure(p_job_id uuid, p_action text, p_operator text, p_reason text, p_error text, p_seen_state text, p_seen_token bigint, p_request_id uuid, p_cause text)
returns table (id bigint, at timestamp with time zone)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
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

create or replace function public.leasectl_metrics_fold(p_lag interval DEFAULT '00:01:00'::interval)
returns table (folded bigint, folded_through bigint)
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    s       public.leasectl_metric_folds;
    v_snap  pg_snapshot := pg_current_snapshot();
    v_n     bigint := 0;
begin
    select * into s from public.leasectl_metric_folds for update skip locked;
    if not found then  -- another fold is running
        return query select 0::bigint, f.folded_through from public.leasectl_metric_folds f;
        return;
    end if;
    if s.candidate is not null and s.candidate > s.folded_through
       and s.candidate_at <= now() - p_lag and pg_snapshot_xmin(v_snap) >= s.candidate_xmax then
        with folded as (
            select m.metric, coalesce(m.tool, '') as tool, coalesce(m.model, '') as model,
                   coalesce(m.provider, '') as provider, public.leasectl_metric_bucket(m.seconds) as le,
                   count(*) as n, coalesce(sum(m.seconds), 0) as seconds
            from public.leasectl_metric_events(s.folded_through, s.candidate, '-infinity', 'infinity') m
            group by 1, 2, 3, 4, 5
        ),
        upsert as (
            insert into public.leasectl_metric_totals as t (metric, tool, model, provider, le, n, seconds)
            select metric, tool, model, provider, le, n, seconds from folded
            on conflict (metric, tool, model, provider, le)
            do update set n = t.n + excluded.n, seconds = t.seconds + excluded.seconds
        )
        -- (a data-modifying WITH runs exactly once, whether or not the query reads it)
        select coalesce(sum(n), 0) into v_n from folded;
        s.folded_through := s.candidate;
        s.folded_at := now();
        s.candidate := null;
    end if;
    if s.candidate is null or s.candidate <= s.folded_through then
        s.candidate := greatest(s.folded_through, coalesce((select max(id) from public.job_events), 0));
        -- this transaction's own id: greater than that of every transaction that had one before
        -- now (a snapshot's xmax is not: it is only the newest completed id plus one)
        s.candidate_xmax := pg_current_xact_id();
        s.candidate_at := now();
    end if;
    update public.leasectl_metric_folds f
    set folded_through = s.folded_through, candidate = s.candidate, candidate_xmax = s.candidate_xmax,
        candidate_at = s.candidate_at, folded_at = s.folded_at;
    return query select v_n, s.folded_through;
end $$;


-- ---------------------------------------------------------------------------------------
-- Inlined functions that read nothing keep no SET clause (it would stop the inlining); being
-- parsed under the caller's search_path when inlined, they name their operators and types.
create or replace function public.leasectl_worker_id_bound(p_id text) returns boolean
language sql stable parallel safe as $$
    select p_id operator(pg_catalog.=) session_user::pg_catalog.text
        or pg_catalog.starts_with(p_id, session_user::pg_catalog.text operator(pg_catalog.||) ':')
$$;

create or replace function public.leasectl_binds_worker_identity() returns boolean
language sql stable as $$
    select coalesce(pg_catalog.row_security_active('public.tool_jobs'::pg_catalog.regclass)
                    and pg_catalog.pg_has_role(current_user, pg_catalog.to_regrole('leasectl_worker'), 'USAGE'),
                    false)
$$;

create or replace function public.leasectl_is_worker_login() returns boolean
language sql stable as $$
    select pg_catalog.current_setting('is_superuser') operator(pg_catalog.=) 'off'
           and coalesce(pg_catalog.pg_has_role(session_user, pg_catalog.to_regrole('leasectl_worker'), 'USAGE'),
                        false)
$$;

insert into leasectl_migrations (version, name) values (12, '0012_trust_boundary')
on conflict (version) do nothing;
