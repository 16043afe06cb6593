-- 0024: a call made within another inherits its parent's trace (issue 30, "Traces").
--
-- A chain's next stage (worker/complete_and_enqueue.sql) carried its parent's trace_id, but a call
-- enqueued with parent_id through worker/enqueue.sql did not unless its client repeated it: a worker
-- in another language delegating a call broke the trace. The chain trigger of 0014 now fills a
-- missing trace_id from its parent's row (one more read by primary key, only when the new call
-- has a parent and no trace). A trace the caller gives is kept: it is the caller's to name.
-- Nothing else of the trigger changes (its text below is 0014's with that one step added).

create or replace function public.leasectl_chain_insert() returns trigger
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
    -- a call made within another belongs to its trace unless its caller names one (0024): every
    -- client, in any language, gets the same answer (the parent's row, read again by its key)
    if new.trace_id is null then
        select j.trace_id into new.trace_id from public.tool_jobs j where j.id = new.parent_id;
    end if;
    new.deadline_at := least(new.deadline_at, p.deadline_at);  -- least() passes over a null
    return new;
end $$;

insert into leasectl_migrations (version, name) values (24, '0024_trace_inherit')
on conflict (version) do nothing;
