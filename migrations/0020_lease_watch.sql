-- 0020: a claim whose cost does not grow with the number of running calls.
--
-- Every claim (queries/worker/claim.sql, claim_many.sql, complete_and_claim.sql) first looks for
-- a running call whose lease has run out. No index can find those: one on lease_until would cost
-- every heartbeat its HOT update (a heartbeat rewrites lease_until), so the claim read every
-- running call, ~1 ms at none and ~3 ms at 10,000 (README, "Where the time goes").
--
--   leasectl_lease_watch   one row: next_expiry, a time before which no running call's lease can
--                          have run out. A claim skips the search while next_expiry > now() (one
--                          read of one row), and searches as before otherwise.
--
-- Who moves it, and why it stays a lower bound:
--   - raised only by leasectl_raise_lease_watch(), which the supervisor runs after each sweep
--     (queries/supervisor/raise_lease_watch.sql): the earliest lease_until of the running calls
--     it sees, and never later than now() + the shortest lease any tool grants - 2 s, so that a
--     claim granted in a transaction that began up to 2 s earlier, whose row this snapshot cannot
--     see, is still covered: a lease granted at t ends at t + lease_seconds at the earliest (or
--     at its deadline, past which no claim may take the call again, or at its hold, counted in).
--     It raises only if nothing lowered the watch since its snapshot (epoch), and never more
--     than a day ahead (nothing running and no tool: nothing to wait for).
--   - lowered by triggers, for everything else that can make a lease end sooner: a running call
--     inserted as such, a lease shortened or written already over (an UPDATE by hand, a tool's
--     lease_seconds cut while it runs), a tool created or its lease or hold shortened.
--   Heartbeats only lengthen a lease: they fire nothing and keep their HOT updates (the triggers'
--   WHEN clauses are evaluated without calling a function).
-- Without a supervisor nothing raises it: next_expiry stays at -infinity and every claim
-- searches, as before this migration. Whatever the watch lets a claim skip that it should not
-- have (a grant held open more than 2 s across a raise, a deadline moved later), the sweep itself
-- reads every running call and resolves it within its interval.

create table public.leasectl_lease_watch (
    id          boolean primary key default true check (id),
    next_expiry timestamptz not null default '-infinity',
    epoch       bigint not null default 0,
    raised_at   timestamptz
);
insert into public.leasectl_lease_watch default values;
revoke all on public.leasectl_lease_watch from public;
do $$
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_worker') then
        grant select on public.leasectl_lease_watch to leasectl_worker, leasectl_operator, leasectl_auditor,
                                                       leasectl_supervisor;
    end if;
end $$;

-- a lease that ends before the watch: the watch moves back to it (no row lock unless it must)
create function public.leasectl_lease_watch_lower() returns trigger
language plpgsql security definer set search_path = pg_catalog, public, pg_temp as $$
declare
    v_ends timestamptz;
begin
    if tg_table_name = 'tools' then
        -- the earliest a lease of this tool granted from now on can end
        v_ends := now() + least(new.lease_seconds, coalesce(new.max_hold_seconds, new.lease_seconds))
                          * interval '1 second' - interval '2 seconds';
    else
        v_ends := new.lease_until;
    end if;
    update public.leasectl_lease_watch w
       set next_expiry = v_ends, epoch = w.epoch + 1
     where w.next_expiry > v_ends;
    return null;
end $$;

create trigger tool_jobs_lease_watch_insert
    after insert on public.tool_jobs
    for each row
    when (new.state = 'running' and new.lease_until is not null)
    execute function public.leasectl_lease_watch_lower();

create trigger tool_jobs_lease_watch_update
    after update of lease_until on public.tool_jobs
    for each row
    when (new.state = 'running' and (new.lease_until < old.lease_until or new.lease_until <= now()))
    execute function public.leasectl_lease_watch_lower();

create trigger tools_lease_watch
    after insert or update of lease_seconds, max_hold_seconds on public.tools
    for each row
    execute function public.leasectl_lease_watch_lower();

create function public.leasectl_raise_lease_watch() returns setof timestamptz
language sql volatile security definer set search_path = pg_catalog, public, pg_temp as $$
    with seen as (
        select w.epoch from public.leasectl_lease_watch w
    ),
    bound as (
        select least((select min(j.lease_until) from public.tool_jobs j where j.state = 'running'),
                     now() + (select min(least(t.lease_seconds, coalesce(t.max_hold_seconds, t.lease_seconds)))
                              from public.tools t) * interval '1 second' - interval '2 seconds',
                     now() + interval '1 day') as next_expiry
    )
    update public.leasectl_lease_watch w
       set next_expiry = b.next_expiry, epoch = w.epoch + 1, raised_at = now()
      from bound b, seen s
     -- re-checked on the latest version of the row: a lowering committed since this snapshot,
     -- for a lease this snapshot may not see, wins
     where w.epoch = s.epoch
    returning w.next_expiry
$$;

revoke all on function public.leasectl_raise_lease_watch() from public;
revoke all on function public.leasectl_lease_watch_lower() from public;
do $$
begin
    if exists (select 1 from pg_catalog.pg_roles where rolname = 'leasectl_supervisor') then
        grant execute on function public.leasectl_raise_lease_watch() to leasectl_supervisor;
    end if;
end $$;
select public.leasectl_give_to_owner('public.leasectl_raise_lease_watch()');
select public.leasectl_give_to_owner('public.leasectl_lease_watch_lower()');

insert into leasectl_migrations (version, name) values (20, '0020_lease_watch')
on conflict (version) do nothing;
