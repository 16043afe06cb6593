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
-- Bounds. The lease's are one check, judged on every write: a heartbeat writes the lease and
-- fires no trigger (a check costs nothing a HOT update needs). Every other rule of a call's row is
-- the one guard's below: PostgreSQL parses and prepares each check constraint again for every
-- statement that writes the table (each claim, completion and heartbeat), 7,700 characters of
-- expression trees for tool_jobs' nine, the largest share of what 0014 and 0015 added to a call
-- (README, "Before and after 0014 and 0015"); the guard's tests are prepared once per session and
-- run only when a column they judge is written. So the state, attempt and token checks of 0001
-- go (the guard refuses a state outside the machine as an illegal transition, counts the attempt
-- from 0 by one per claim and never lets the token go down from 0), and so does 0013's
-- tool_jobs_finite_times: the lease's and heartbeat's finiteness is this check, every other time
-- of a call is judged by the guard (dated now by the rules, or finite when a call is made).

alter table public.tool_jobs
    drop constraint tool_jobs_state_check,
    drop constraint tool_jobs_attempt_check,
    drop constraint tool_jobs_fencing_token_check,
    drop constraint tool_jobs_finite_times,
    drop constraint tool_jobs_lease_within_deadline,
    -- a running call has a lease; a lease is finite, ends within a day and no later than the
    -- deadline; a heartbeat is finite and within its lease (a heartbeat in the year 9000 would read
    -- healthy for ever). No check here reads now() against a time another transaction wrote (a
    -- long transaction of the control plane would meet a heartbeat committed after it began): the
    -- guard below dates what a worker writes. (null: a queued or finished call has no lease.)
    add constraint tool_jobs_lease_bounded check (
        isfinite(lease_until) and isfinite(heartbeat_at) and heartbeat_at <= lease_until
        and lease_until <= least(deadline_at, now() + interval '1 day')
        and (lease_until is not null or state not in ('running', 'cancel_requested'))) not valid;

alter table public.shutdowns
    add constraint shutdowns_window_bounded check (window_seconds > 0 and window_seconds <= 604800) not valid,
    add constraint shutdowns_requested_by_named check (requested_by ~ '[[:alnum:]]') not valid;

alter table public.grants
    add constraint grants_resource_bounded check (length(resource) <= 1000 and length(kind) <= 100) not valid;

alter table public.fleet_events
    -- as text: pg_column_size counts a value read from a table at its compressed size
    add constraint fleet_events_details_bounded check (octet_length(details::text) <= 65536) not valid,
    add constraint fleet_events_actor_bounded check (length(actor) <= 200) not valid;

-- A journal row's actor stays within 200 characters (a check: the journal's own rows name who
-- set leasectl.actor, whoever that is). Its details stay within 64 KiB and an operator's name holds
-- a letter or a digit: judged where such rows are written by others than the database (the
-- journal's guard below, leasectl_operator_journal, and the guard of a check's details), not as
-- checks that every row of the journal, two per call, would parse again.
alter table public.job_events
    add constraint job_events_actor_bounded check (length(actor) <= 200) not valid;

-- ---------------------------------------------------------------------------------------
-- One guard judges every change of a call: 0013's state rules, 0014's chain rules (membership
-- never changes, a cancel reaches the chain, a check is its owner's, a verifiable request is
-- checked before it is repeated and never ends failed or cancelled unchecked) and this walk's
-- story rules (what a login other than the schema's owner may write with a change). One
-- function behind one trigger, not three: each plpgsql row trigger costs its call whatever it
-- then decides, and the claim and the completion of every call paid three (README, "Before and
-- after 0014 and 0015"). The order of the rules is the order the three triggers ran in (their
-- names sorted): chain, state, story, and last the unchecked request's end.

create or replace function public.leasectl_tool_jobs_guard()
returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
declare
    v_side_effect text;
    v_agent_state text;
    v_max integer;
    v_fast boolean;
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
                -- an attempt left (the claim asks the same), and no cancel request on the chain (LCS13)
                select old.attempt < t.max_attempts + old.extra_attempts
                       and not exists (select 1 from public.tool_jobs c
                                       where c.chain_id = new.chain_id and c.cancel_requested_at is not null)
                  into v_fast
                  from public.tools t where t.name = old.tool;
                if v_fast then
                    new.claimed_at := now();
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

-- One trigger on every column a rule reads a change of. Not on lease_until or heartbeat_at: a
-- heartbeat fires no trigger and stays HOT (the lease's bounds are the checks above); a requeue
-- that writes a heartbeat names the state, so the guard sees it.
drop trigger tool_jobs_guard_update on public.tool_jobs;
create trigger tool_jobs_guard_update
    before update of state, owner_id, fencing_token, idempotency_key, tool, id, created_at,
                     retry_approved_by, payload, attempt, finished_at, parent_id, chain_id, stage,
                     accepted_at, trace_id, cancel_requested_at, side_effect_started_at, checked_at,
                     check_found, check_token, check_details, completed_despite_cancel, terminal_reason,
                     claimed_at, result, external_request_id, error, agent_id, session_id,
                     deadline_at, retry_approved_at, cancel_requested_by, cancel_requested_reason
    on public.tool_jobs
    for each row
    execute function public.leasectl_tool_jobs_guard();

-- ---------------------------------------------------------------------------------------
-- The journal's guard (0013's) also keeps side_effect_checked for the database itself.

create or replace function public.leasectl_job_events_kind_guard()
returns trigger
language plpgsql set search_path = pg_catalog, public, pg_temp as $$
begin
    new.at := now();
    new.db_role := session_user;
    if current_user = public.leasectl_schema_owner() then
        return new;
    end if;
    -- (0015) a row's details stay within 64 KiB, as text (pg_column_size would count a value read
    -- from a table at its compressed size)
    if octet_length(new.details::text) > 65536 then
        raise exception 'the details of a journal row stay within 64 KiB' using errcode = 'check_violation',
            constraint = 'job_events_details_bounded';
    end if;
    -- Ownership and state kinds are the tool_jobs triggers' alone, and so is side_effect_started
    -- (the trigger's name for the start of a request before 0005). tool_request_started, the
    -- seed's name the trigger uses now, stays a worker kind as well: a worker reports the start
    -- of a request that marks no side effect (a read-only tool) with it, under the rule below.
    -- (0015) and side_effect_checked, the journal of a check (worker/record_check.sql), which
    -- 0014 refused in a trigger of its own: one WHEN clause less on every row of the journal
    if new.kind in ('enqueued', 'claimed', 'reclaimed', 'state_changed', 'fenced',
                    'side_effect_started', 'side_effect_checked') then
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

-- ---------------------------------------------------------------------------------------
-- An operator's decision is journaled under a name, within bounds (0013's, with 0015's rules).

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
    -- (0015) a name of blanks (a tab, a no-break or zero-width space) names nobody; what is
    -- journaled stays within 64 KiB
    if p_actor !~ '[[:alnum:]]' then
        raise exception 'an operator''s name holds a letter or a digit' using errcode = 'check_violation',
            constraint = 'job_events_operator_named';
    end if;
    if octet_length(p_details::text) > 65536 then
        raise exception 'the details of a journal row stay within 64 KiB' using errcode = 'check_violation',
            constraint = 'job_events_details_bounded';
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
