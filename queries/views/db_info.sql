-- Purpose: what the console's header and guards need to know about its own session: the
--   database, the role, the display clock, whether the session is read-only, and whether the
--   role may act at all (column privileges of the operator statements).
-- Zero rows: never.
-- Parameters: none
select current_database() as database,
       current_user as role,
       current_setting('server_version') as server_version,
       leasectl_now() as db_now,
       current_setting('transaction_read_only') = 'on' as session_read_only,
       has_column_privilege('tool_jobs', 'cancel_requested_at', 'UPDATE')
           and has_column_privilege('tool_jobs', 'retry_approved_by', 'UPDATE')
           and has_table_privilege('job_events', 'INSERT') as can_act,
       (select max(version) from leasectl_migrations) as schema_version
