-- 0002: least-privilege group roles.
--
--   leasectl_worker    claims, heartbeats and finishes calls; cannot approve a retry
--   leasectl_operator  cancels, marks terminal, approves retries; cannot take ownership
--   leasectl_auditor   reads everything, writes nothing (by GRANT: default_transaction_read_only
--                      is not a boundary, any session can turn it off)
--
-- Roles are cluster-wide. Where the migrating user may not create roles, the roles are skipped
-- with a NOTICE and the schema still works for its owner; `leasectl doctor` reports it.
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
            exception when insufficient_privilege then
                raise notice 'leasectl: % may not create role %; skipping roles (run this migration as a role with CREATEROLE to get them)', current_user, r;
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
        begin
            alter role leasectl_worker set statement_timeout = '5s';
            alter role leasectl_worker set lock_timeout = '2s';
            alter role leasectl_worker set idle_in_transaction_session_timeout = '30s';
        exception when insufficient_privilege then
            raise notice 'leasectl: cannot set timeouts on leasectl_worker as %', current_user;
        end;
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
        begin
            alter role leasectl_operator set statement_timeout = '10s';
            alter role leasectl_operator set lock_timeout = '3s';
            alter role leasectl_operator set idle_in_transaction_session_timeout = '60s';
        exception when insufficient_privilege then
            raise notice 'leasectl: cannot set timeouts on leasectl_operator as %', current_user;
        end;
    end if;

    if exists (select 1 from pg_roles where rolname = 'leasectl_auditor') then
        grant select on tools, tool_jobs, job_events, leasectl_migrations to leasectl_auditor;
        begin
            alter role leasectl_auditor set statement_timeout = '30s';
            alter role leasectl_auditor set lock_timeout = '1s';
            alter role leasectl_auditor set idle_in_transaction_session_timeout = '60s';
        exception when insufficient_privilege then
            raise notice 'leasectl: cannot set timeouts on leasectl_auditor as %', current_user;
        end;
    end if;
end $$;

insert into leasectl_migrations (version, name) values (2, '0002_roles')
on conflict (version) do nothing;
