-- Purpose: release the migrators' advisory lock taken by meta/migrate_lock.sql.
-- Zero rows: never.
-- Parameters: none
select pg_advisory_unlock(hashtext('leasectl.migrate')) as unlocked
