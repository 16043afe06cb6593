-- Purpose: before a `payload:` filter is searched (console/db/reads.py): whether this session's
--   role may read the calls' payloads -- the column privilege, SELECT on tool_jobs.payload (granted
--   on the table or on the column) -- and the statement timeout the search runs under (ms; 0: none).
-- Zero rows: never.
-- Parameters: none
select has_column_privilege(current_user, 'public.tool_jobs', 'payload', 'SELECT') as allowed,
       current_user::text as role,
       (select setting::integer from pg_settings where name = 'statement_timeout') as statement_timeout_ms
