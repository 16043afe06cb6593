-- 0002: least-privilege group roles.
--
--   leasectl_worker    claims, heartbeats and finishes calls; cannot approve a retry
--   leasectl_operator  cancels, marks terminal, approves retries; cannot take ownership
--   leasectl_auditor   reads everything, writes nothing (by GRANT: default_transaction_read_only
--                      is not a boundary, any session can turn it off)
--
-- Roles are cluster-wide. Where the migrating user may not create roles, the roles are skipped
-- with a NOTICE and the schema still works for its owner; `leasectl doctor` reports it.
-- Two databases of one cluster may be migrated at the same moment (the advisory lock of
-- `leasectl migrate` is per database): every cluster-wide step here is idempotent and
-- tolerates the other migrator doing the same step concurrently.
--
-- Settings made with ALTER ROLE apply to a session that logs in *as* that role, not to members
-- of it: give each login role the same settings (doctor prints the commands).

do $$
declare
    r text;
begin
    foreach r in array array['leasectl_worker', 'leasectl_operator', 'leasectl_auditor'] loop
        if not exists (select 1 from pg_roles where rolname = r) then
            begin
                execute format('create role %I nologin', r);
            exception
                when insufficient_privilege then
                    raise notice 'leasectl: % may not create role %; skipping roles (run this migration as a role with CREATEROLE to get them)', current_user, r;
                when duplicate_object or unique_violation then
                    null;  -- created at this moment by a migrator of another database
            end;
        end if;
    end loop;
end $$;

-- Nobody but the owner gets anything by default; history is never writable except by INSERT.
revoke all on tools, tool_jobs, job_events, leasectl_migrations from public;

do $$
begin
    if exists (select 1 from pg_roles where rolname = 'leasectl_worker') then
        grant select on tools, tool_jobs, job_events, leasectl_migrations to leasectl_worker;
        grant insert on tool_jobs, job_events to leasectl_worker;
        -- idempotency_key: the no-op upsert of enqueue.sql (the trigger refuses a real change)
        grant update (state, owner_id, lease_until, fencing_token, heartbeat_at, attempt,
                      claimed_at, finished_at, result, error, side_effect_started_at,
                      external_request_id, terminal_reason, completed_despite_cancel,
                      idempotency_key)
            on tool_jobs to leasectl_worker;
    end if;
    if exists (select 1 from pg_roles where rolname = 'leasectl_operator') then
        grant select on tools, tool_jobs, job_events, leasectl_migrations to leasectl_operator;
        grant insert on job_events to leasectl_operator;
        -- no owner_id: an operator never takes ownership; fencing_token and lease_until: a
        -- forced mark-terminal fences the owner out
        grant update (state, lease_until, fencing_token, finished_at, cancel_requested_at,
                      cancel_requested_by, cancel_requested_reason, retry_approved_by,
                      retry_approved_at, retry_approved_reason, terminal_reason, extra_attempts,
                      side_effect_started_at, error)
            on tool_jobs to leasectl_operator;
    end if;
    if exists (select 1 from pg_roles where rolname = 'leasectl_auditor') then
        grant select on tools, tool_jobs, job_events, leasectl_migrations to leasectl_auditor;
    end if;
end $$;

-- Per-role limits: a worker's statement is short; an operator may wait a little longer for a
-- lock; an auditor reads more but never holds a transaction open.
do $$
declare
    s record;
begin
    for s in
        select * from (values
            ('leasectl_worker', 'statement_timeout', '5s'),
            ('leasectl_worker', 'lock_timeout', '2s'),
            ('leasectl_worker', 'idle_in_transaction_session_timeout', '30s'),
            ('leasectl_operator', 'statement_timeout', '10s'),
            ('leasectl_operator', 'lock_timeout', '3s'),
            ('leasectl_operator', 'idle_in_transaction_session_timeout', '60s'),
            ('leasectl_auditor', 'statement_timeout', '30s'),
            ('leasectl_auditor', 'lock_timeout', '1s'),
            ('leasectl_auditor', 'idle_in_transaction_session_timeout', '60s')
        ) as v(role_name, setting, value)
    loop
        continue when not exists (select 1 from pg_roles where rolname = s.role_name);
        continue when exists (
            select 1 from pg_db_role_setting d join pg_roles ro on ro.oid = d.setrole
            where ro.rolname = s.role_name and d.setdatabase = 0
              and s.setting || '=' || s.value = any (d.setconfig));
        begin
            execute format('alter role %I set %s = %L', s.role_name, s.setting, s.value);
        exception
            when insufficient_privilege then
                raise notice 'leasectl: cannot set % on % as %', s.setting, s.role_name, current_user;
            when others then
                -- "tuple concurrently updated": a migrator of another database set it just now
                if sqlstate <> 'XX000' then
                    raise;
                end if;
        end;
    end loop;
end $$;

insert into leasectl_migrations (version, name) values (2, '0002_roles')
on conflict (version) do nothing;
