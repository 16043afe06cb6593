-- 0009: what a tool call costs the database (issue 11), every guarantee kept.
--
-- Measured before this file (embedded PostgreSQL 18, 2 cores, synchronous_commit on, one call
-- claimed and completed per commit): the two tool_jobs triggers took about 260 us of server CPU
-- per call, half of the server's work for a call. A profile put the time in three places:
--
--   * the WHEN clauses. PostgreSQL keeps a trigger's WHEN clause as a node string and parses it
--     again for every statement that could fire the trigger (each UPDATE, each half of the fused
--     complete_and_claim.sql), and text constants are serialised byte by byte: the guard's WHEN
--     alone was 9 % of the server's CPU per call, the journal's 2 %;
--   * the guard's plpgsql, which walked its fifteen rules for the two transitions every call
--     makes (queued -> running, running -> succeeded);
--   * pg_notify on every state change. Besides its own cost it takes the cluster-wide notify
--     lock at commit and holds it through the commit record's flush (async.c,
--     PreCommit_Notify): notifying transactions commit one at a time and lose group commit,
--     about 20 % of the calls per second at 4 worker processes.
--
-- What changes (and what does not):
--
--   * The guard fires on UPDATE OF the columns it judges (a column list is a bitmap test, no
--     parse) -- today's WHEN columns plus payload, which LCS05 names but the WHEN never covered.
--     A second trigger with a small WHEN (no text array, no parse of the rest) sends in-place
--     updates of a finished or queued call to the same guard whatever columns they touch, the
--     columns of migrations still to come included: what `old.state in (terminal) or old.state =
--     'queued'` did. Heartbeats (lease_until and heartbeat_at only) fire neither on a running
--     call: they stay HOT and trigger-free.
--   * The guard first recognises the two transitions every call makes, in their fully legal form,
--     in one expression each, and accepts them at once; each fast path is exactly the set of
--     changes the full rules accept without change (tests/db/test_worker_cost.py replays the
--     rules' refusals through the paths). Anything else walks every rule of 0005, unchanged.
--   * The journal fires on UPDATE OF the four columns its WHEN compared; its body decides, as
--     before, whether anything changed. History is still written by trigger, every row of it.
--   * NOTIFY now means "something a human should see changed", and the console's poll (2 s by
--     default) carries the rest. It is sent for: a call entering outcome_unknown, failed,
--     cancel_requested or cancelled; a call leaving cancel_requested or outcome_unknown (the
--     answer to a cancel, a human's decision); a reclaim or a fencing (a lease taken from its
--     owner); any change made in the name of an operator or of the control plane
--     (leasectl.actor, which worker logins cannot set: operator actions, sweeps, shutdown steps);
--     every operator journal row, applied, refused or failed (leasectl_operator_journal); and a
--     worker's report of a stale write refused or of trouble (heartbeat_lost, result_rejected,
--     receiver_rejected, ownership_unknown, database_error: worker/record_event.sql). It is no
--     longer sent for an enqueue, a plain claim, a plain completion, a worker's requeue after a
--     retryable failure, or the start of a request: those wait for the poll. The channel and the
--     payload keys (id, state, fencing_token; kind for events) are as before.
--
-- The kind guard of 0005 keeps its function and its rules: its WHEN clause still skips the rows
-- these triggers write, worker events still meet every rule (LCH02, LCH03); the clause itself is
-- written in a form that costs less to read (below).
--
-- Runnable with `psql -v ON_ERROR_STOP=1 -f` and by `leasectl migrate`.

-- ---------------------------------------------------------------------------------------
-- The state machine: 0005's function, every rule in the same order, with two fast paths first.
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

    -- (0005) the same rule on the other road back to a worker. Requeueing an unverifiable call
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

    -- (0005) outcome_unknown is left only by a human decision that is on the record. The operator
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

-- When the guard runs. 0005's WHEN clause fired it for
--   old.state in (succeeded, failed, cancelled), old.state = 'queued', or a change of state,
--   owner_id, fencing_token, idempotency_key, tool, id, created_at or retry_approved_by.
-- A changed column is a column the UPDATE sets: the first trigger below fires for every UPDATE
-- that sets one of them (payload added), with nothing to parse. The second covers the two
-- conditions on the old row: an update of a finished call (finished_at is stamped by this guard
-- on every entry into a terminal state, so a finished call always has one) or of a queued call
-- that leaves its state as it is, whatever columns it sets -- a lease-only update or a column
-- added by a later migration included. A change of state is the first trigger's. Both triggers
-- run the same function; an update both fire (a no-op upsert of a queued call) runs it twice
-- and is accepted or refused twice alike. The names sort so that the settled check runs first.
drop trigger tool_jobs_guard_update on tool_jobs;
create trigger tool_jobs_guard_update
    before update of state, owner_id, fencing_token, idempotency_key, tool, id, created_at,
                     retry_approved_by, payload
    on tool_jobs
    for each row
    execute function leasectl_tool_jobs_guard();

create trigger tool_jobs_guard_settled
    before update on tool_jobs
    for each row
    when (new.state = old.state and (old.finished_at is not null or old.state = 'queued'))
    execute function leasectl_tool_jobs_guard();

-- ---------------------------------------------------------------------------------------
-- The journal: 0005's function, with NOTIFY for notable changes only (above). Every history
-- row it wrote it still writes, with the same kind, actor and details.
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

-- 0005's WHEN compared exactly these four columns; a column the UPDATE does not set cannot have
-- changed, and the body above compares the values itself.
drop trigger tool_jobs_journal_update on tool_jobs;
create trigger tool_jobs_journal_update
    after update of state, owner_id, fencing_token, side_effect_started_at
    on tool_jobs
    for each row
    execute function leasectl_tool_jobs_journal();

-- ---------------------------------------------------------------------------------------
-- The kind guard's WHEN clause, in a cheaper form. Its function (0005) is unchanged, and so is
-- what reaches it: every row a client writes, and every row whose time or role is not the
-- database's. What changes is how the owner is recognised: as text, not as a `name` constant,
-- which a node string spells out as 64 bytes to parse for every event (two per call); text
-- equality is byte equality here (the default collation of a database is deterministic).
drop trigger job_events_kind_guard on job_events;
do $$
begin
    execute format($f$
        create trigger job_events_kind_guard
            before insert on job_events
            for each row
            when (current_user::text <> %L
                  or new.at is distinct from now()
                  or new.db_role is distinct from session_user)
            execute function leasectl_job_events_kind_guard()
    $f$, leasectl_schema_owner());
end $$;

-- ---------------------------------------------------------------------------------------
-- The operator journal of 0005, unchanged but for one NOTIFY: an operator's action, applied,
-- refused or failed, reaches every console at once (an applied one also changes the call, which
-- the journal trigger announces as well; the console wakes once for both).
create or replace function leasectl_operator_journal(p_kind text, p_job_id uuid, p_actor text, p_fencing_token bigint,
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
    perform pg_catalog.pg_notify('leasectl_jobs',
                                 pg_catalog.json_build_object('id', v_row.job_id, 'kind', v_row.kind)::text);
    return v_row;
end $$;

insert into leasectl_migrations (version, name) values (9, '0009_worker_cost')
on conflict (version) do nothing;
