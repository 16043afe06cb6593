-- 0001: tool registry, tool calls with leases and fencing tokens, append-only history.
--
-- Runnable as `psql -v ON_ERROR_STOP=1 -f migrations/0001_tool_jobs.sql` or through
-- `leasectl migrate` (which also records a checksum and serialises migrators).
-- The state machine lives here, in triggers, so that no client -- a worker in another
-- language, a psql session, a buggy console -- can move a call in a way the protocol forbids.

create table if not exists leasectl_migrations (
    version     integer primary key,
    name        text not null,
    checksum    text,                       -- filled by `leasectl migrate`; null when applied by psql
    applied_at  timestamptz not null default now(),
    applied_by  text not null default current_user
);

-- The side-effect class belongs to the tool, not to a run (seed 004), and so does the lease
-- sizing: a model must never pick its own TTL (seed 000).
create table tools (
    name                   text primary key,
    side_effect            text not null
        check (side_effect in ('read_only', 'mutating_verifiable', 'mutating_unverifiable')),
    lease_seconds          numeric not null check (lease_seconds > 0),
    heartbeat_seconds      numeric not null check (heartbeat_seconds > 0),
    missed_heartbeats      integer not null default 1 check (missed_heartbeats >= 1),
    jitter_seconds         numeric not null default 0 check (jitter_seconds >= 0),
    max_attempts           integer not null default 3 check (max_attempts >= 1),
    stage_timeout_seconds  numeric check (stage_timeout_seconds > 0),
    description            text,
    auto_registered        boolean not null default false,
    -- L > R x H + J: a lease that a normal pause can take away from a live worker is a bug.
    constraint tools_lease_sizing
        check (lease_seconds > missed_heartbeats * heartbeat_seconds + jitter_seconds)
);

create table tool_jobs (
    -- column order is deliberate: fixed-width and short columns first, the jsonb documents
    -- last, so that the lease and health columns are read without walking through payloads
    id                        uuid primary key default gen_random_uuid(),
    state                     text not null default 'queued'
        check (state in ('queued', 'running', 'cancel_requested', 'succeeded', 'failed',
                         'cancelled', 'outcome_unknown')),
    fencing_token             bigint not null default 0 check (fencing_token >= 0),
    lease_until               timestamptz,
    heartbeat_at              timestamptz,
    attempt                   integer not null default 0 check (attempt >= 0),
    -- attempts granted by humans on top of tools.max_attempts (approve_retry adds one)
    extra_attempts            integer not null default 0 check (extra_attempts >= 0),
    created_at                timestamptz not null default now(),
    claimed_at                timestamptz,
    finished_at               timestamptz,
    deadline_at               timestamptz,
    cancel_requested_at       timestamptz,
    side_effect_started_at    timestamptz,
    retry_approved_at         timestamptz,
    completed_despite_cancel  boolean not null default false,
    tool                      text not null references tools (name),
    owner_id                  text,
    agent_id                  text,
    session_id                text,
    model                     text,
    provider                  text,
    cancel_requested_by       text,
    cancel_requested_reason   text,
    external_request_id       text,
    retry_approved_by         text,
    retry_approved_reason     text,
    terminal_reason           text,
    idempotency_key           text collate "C" not null unique,  -- C: prefix ranges use the index
    payload_hash              text,
    payload                   jsonb not null,
    result                    jsonb,
    error                     jsonb
) with (fillfactor = 80);  -- room on the page keeps heartbeat updates HOT

comment on table tool_jobs is
    'Long-running tool calls. Ownership is a lease (owner_id, lease_until) plus a monotonic fencing_token.';

-- No index may cover lease_until or heartbeat_at: a heartbeat that touches an indexed
-- column cannot be a HOT update, and heartbeats are by far the most frequent write.

-- claim: oldest queued first
create index tool_jobs_queued_idx on tool_jobs (created_at) where state = 'queued';
-- claim of expired leases, the sweep, the console's attention list and counts
create index tool_jobs_live_idx on tool_jobs (state, tool)
    where state in ('running', 'cancel_requested', 'outcome_unknown');
-- "failed in the last hour"
create index tool_jobs_failed_idx on tool_jobs (finished_at) where state = 'failed';
-- the calls list pages through everything by keyset, newest first
create index tool_jobs_created_idx on tool_jobs (created_at, id);
create index tool_jobs_agent_idx on tool_jobs (agent_id) where agent_id is not null;
create index tool_jobs_external_request_idx on tool_jobs (external_request_id)
    where external_request_id is not null;

create table job_events (
    id             bigint generated always as identity primary key,
    job_id         uuid not null,           -- no FK: history outlives any cleanup of tool_jobs
    at             timestamptz not null default now(),
    kind           text not null check (kind ~ '^[a-z][a-z0-9_]*$'),
    actor          text,
    fencing_token  bigint,
    state_from     text,
    state_to       text,
    owner_from     text,
    owner_to       text,
    lease_until    timestamptz,
    reason         text,
    request_id     uuid,
    details        jsonb not null default '{}'::jsonb
);

comment on table job_events is
    'Append-only history of every call: ownership and state changes (by trigger), worker and operator events.';

create index job_events_job_idx on job_events (job_id, id);
create index job_events_at_idx on job_events using brin (at);
-- zombie detection: stale-token writes rejected recently
create index job_events_rejections_idx on job_events (at)
    where kind in ('heartbeat_lost', 'result_rejected', 'receiver_rejected');

-- ---------------------------------------------------------------------------------------
-- Unknown tools are registered on first use with the most careful class. Until someone
-- registers the tool properly, a lost answer from it waits for a human instead of a retry.
create function leasectl_autoregister_tool() returns trigger
language plpgsql security definer set search_path = pg_catalog, public as $$
begin
    insert into public.tools (name, side_effect, lease_seconds, heartbeat_seconds,
                              missed_heartbeats, jitter_seconds, description, auto_registered)
    values (new.tool, 'mutating_unverifiable', 90, 30, 1, 20,
            'registered automatically on first use; side-effect class unknown, treated as unverifiable',
            true)
    on conflict (name) do nothing;
    return new;
end $$;

create trigger tool_jobs_autoregister_tool
    before insert on tool_jobs
    for each row when (new.tool is not null)
    execute function leasectl_autoregister_tool();

-- ---------------------------------------------------------------------------------------
-- The state machine. Raises with SQLSTATE class LC so clients can tell a protocol
-- violation from any other error:
--   LCS01 illegal transition      LCS02 fencing token rule     LCS03 terminal row changed
--   LCS04 retry not approved by someone else                   LCS05 immutable column changed
--   LCS06 ownership granted while a lease is live             LCS07 automatic retry of an unverifiable side effect
create function leasectl_tool_jobs_guard() returns trigger
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

    -- an upsert that found an existing key touches the row without changing it
    if new is not distinct from old then
        return new;
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

    if old.state = 'cancel_requested' and new.state = 'succeeded' then
        new.completed_despite_cancel := true;
    end if;
    if new.state in ('succeeded', 'failed', 'cancelled') then
        new.finished_at := coalesce(new.finished_at, now());
    end if;
    return new;
end $$;

create trigger tool_jobs_guard_insert
    before insert on tool_jobs
    for each row execute function leasectl_tool_jobs_guard();

-- The WHEN clause keeps the heartbeat path (lease_until, heartbeat_at only) free of plpgsql.
create trigger tool_jobs_guard_update
    before update on tool_jobs
    for each row
    when (old.state in ('succeeded', 'failed', 'cancelled')
          or new.state is distinct from old.state
          or new.owner_id is distinct from old.owner_id
          or new.fencing_token is distinct from old.fencing_token
          or new.idempotency_key is distinct from old.idempotency_key
          or new.tool is distinct from old.tool
          or new.id is distinct from old.id
          or new.created_at is distinct from old.created_at
          or new.retry_approved_by is distinct from old.retry_approved_by)
    execute function leasectl_tool_jobs_guard();

-- ---------------------------------------------------------------------------------------
-- History is written here, not by clients: a worker that crashes or lies cannot skip it.
-- The actor is the new owner for claims, or whoever the statement named through the
-- transaction-local setting leasectl.actor (operators, the sweeper).
create function leasectl_tool_jobs_journal() returns trigger
language plpgsql security definer set search_path = pg_catalog, public as $$
declare
    v_actor text := coalesce(nullif(current_setting('leasectl.actor', true), ''),
                             new.owner_id, session_user);
    v_kind  text;
begin
    if tg_op = 'INSERT' then
        insert into public.job_events (job_id, at, kind, actor, fencing_token, state_to, details)
        values (new.id, now(), 'enqueued', coalesce(nullif(current_setting('leasectl.actor', true), ''),
                                                      new.agent_id, session_user),
                new.fencing_token, new.state,
                jsonb_build_object('tool', new.tool, 'idempotency_key', new.idempotency_key,
                                   'payload_hash', new.payload_hash));
        perform pg_notify('leasectl_jobs', json_build_object('id', new.id, 'state', new.state)::text);
        return null;
    end if;

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
        perform pg_notify('leasectl_jobs',
                          json_build_object('id', new.id, 'state', new.state,
                                            'fencing_token', new.fencing_token)::text);
    end if;

    if new.side_effect_started_at is distinct from old.side_effect_started_at
       and new.side_effect_started_at is not null then
        insert into public.job_events (job_id, at, kind, actor, fencing_token, state_from, state_to,
                                       owner_from, owner_to, lease_until, details)
        values (new.id, now(), 'side_effect_started', v_actor, new.fencing_token, new.state, new.state,
                new.owner_id, new.owner_id, new.lease_until,
                jsonb_strip_nulls(jsonb_build_object('external_request_id', new.external_request_id)));
    end if;
    return null;
end $$;

create trigger tool_jobs_journal_insert
    after insert on tool_jobs
    for each row execute function leasectl_tool_jobs_journal();

create trigger tool_jobs_journal_update
    after update on tool_jobs
    for each row
    when (new.state is distinct from old.state
          or new.owner_id is distinct from old.owner_id
          or new.fencing_token is distinct from old.fencing_token
          or new.side_effect_started_at is distinct from old.side_effect_started_at)
    execute function leasectl_tool_jobs_journal();

-- ---------------------------------------------------------------------------------------
-- job_events is append-only for everyone, the table owner included.
create function leasectl_job_events_append_only() returns trigger
language plpgsql as $$
begin
    raise exception 'job_events is append-only: % is refused', tg_op using errcode = 'LCH01';
end $$;

create trigger job_events_no_update_delete
    before update or delete on job_events
    for each row execute function leasectl_job_events_append_only();

create trigger job_events_no_truncate
    before truncate on job_events
    for each statement execute function leasectl_job_events_append_only();

-- Ownership and state kinds are the tool_jobs triggers' alone. Those run SECURITY DEFINER, i.e.
-- as the owner of the tables, so "written by the owner" is the test: a client cannot forge the
-- ownership timeline, not even from a trigger of its own on a temporary table. Operator kinds
-- need the privileges of an operator (the right to approve a retry). Time is always now().
create function leasectl_job_events_kind_guard() returns trigger
language plpgsql set search_path = pg_catalog, public as $$
begin
    if new.kind in ('enqueued', 'claimed', 'reclaimed', 'state_changed', 'fenced',
                    'side_effect_started')
       and current_user <> (select pg_get_userbyid(relowner) from pg_class where oid = tg_relid) then
        raise exception 'event kind % is written by the database itself', new.kind
            using errcode = 'LCH02';
    end if;
    if new.kind like 'operator\_%'
       and not has_column_privilege('public.tool_jobs', 'retry_approved_by', 'UPDATE') then
        raise exception 'only an operator may record %', new.kind using errcode = 'LCH02';
    end if;
    new.at := now();
    return new;
end $$;

create trigger job_events_kind_guard
    before insert on job_events
    for each row execute function leasectl_job_events_kind_guard();

-- ---------------------------------------------------------------------------------------
-- Lease health: one definition, used by every view and by the CLI's JSON.
-- Worst first: outcome_unknown, lease_expired, cancel_unheard, zombie, heartbeat_late,
-- over_stage_timeout, healthy.
--
-- The per-tool cutoffs are computed once per query (leasectl_tool_cutoffs), so that the rule
-- applied to each of thousands of live calls is nothing but timestamp comparisons:
--   heartbeat late     no heartbeat for more than H + J
--   cancel unheard     a cancel requested more than 2H + J ago (the worker hears it at its next
--                      heartbeat, one interval at most, and confirms)
--   over stage timeout running for longer than the tool's stage timeout
create function leasectl_tool_cutoffs(p_now timestamptz)
returns table (tool text, late_before timestamptz, unheard_before timestamptz, stage_before timestamptz)
language sql stable parallel safe as $$
    select name,
           p_now - (heartbeat_seconds + jitter_seconds) * interval '1 second',
           p_now - (2 * heartbeat_seconds + jitter_seconds) * interval '1 second',
           p_now - stage_timeout_seconds * interval '1 second'
    from tools
$$;

create function leasectl_job_health(
    p_state text, p_lease_until timestamptz, p_heartbeat_at timestamptz,
    p_cancel_requested_at timestamptz, p_claimed_at timestamptz,
    p_late_before timestamptz, p_unheard_before timestamptz, p_stage_before timestamptz,
    p_recent_rejection boolean, p_now timestamptz
) returns text
language sql immutable parallel safe as $$
    select case
        when p_state = 'outcome_unknown' then 'outcome_unknown'
        when p_state in ('running', 'cancel_requested') and p_lease_until < p_now then 'lease_expired'
        when p_state = 'cancel_requested' and p_cancel_requested_at < p_unheard_before then 'cancel_unheard'
        when p_recent_rejection then 'zombie'
        when p_state in ('running', 'cancel_requested') and p_heartbeat_at < p_late_before then 'heartbeat_late'
        when p_state = 'running' and p_claimed_at < p_stage_before then 'over_stage_timeout'
        else 'healthy'
    end
$$;

create function leasectl_health_rank(p_health text) returns integer
language sql immutable parallel safe as $$
    select case p_health
        when 'outcome_unknown' then 0 when 'lease_expired' then 1 when 'cancel_unheard' then 2
        when 'zombie' then 3 when 'heartbeat_late' then 4 when 'over_stage_timeout' then 5
        else 9 end
$$;

insert into leasectl_migrations (version, name) values (1, '0001_tool_jobs')
on conflict (version) do nothing;
