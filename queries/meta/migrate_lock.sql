-- Purpose: serialise migrators: a second `leasectl migrate` waits here until the first is done.
--   Session-level advisory lock; released by meta/migrate_unlock.sql or when the session ends.
-- Zero rows: never.
-- Parameters: none
select pg_advisory_lock(hashtext('leasectl.migrate')) as locked
