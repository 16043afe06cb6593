-- Purpose: what the console's header and guards need to know about its own session: the
--   database, the role, the display clock, whether the session is read-only, and whether the
--   role may act at all: EXECUTE on the operator functions that queries/operator/ call (since
--   migration 0005 operators have no direct UPDATE on tool_jobs; a worker or an auditor has no
--   EXECUTE on them, a superuser has everything).
-- Zero rows: never.
-- Parameters: none
select current_database() as database,
       current_user as role,
       current_setting('server_version') as server_version,
       leasectl_now() as db_now,
       current_setting('transaction_read_only') = 'on' as session_read_only,
       coalesce(has_function_privilege(
                    to_regprocedure('leasectl_request_cancel(uuid,text,bigint,text,text)'), 'EXECUTE')
                and has_function_privilege(
                    to_regprocedure('leasectl_mark_terminal(uuid,text,bigint,text,text,text,boolean)'), 'EXECUTE')
                and has_function_privilege(
                    to_regprocedure('leasectl_approve_retry(uuid,text,bigint,text,text)'), 'EXECUTE'),
                false) as can_act,
       (select max(version) from leasectl_migrations) as schema_version
