-- Purpose: serialise migrators behind a connection pooler in transaction mode: the lock of
--   meta/migrate_lock.sql, taken for the current transaction only (the migrator then applies
--   every pending file inside it). A session-level lock would stay on whichever server connection
--   took it, held for as long as the pooler keeps that connection, and meta/migrate_unlock.sql
--   could reach another one. Both kinds share one key: a migrator straight to the server and one
--   through the pooler still wait for each other.
-- Zero rows: never.
-- Parameters: none
select true as locked from (select pg_advisory_xact_lock(hashtext('leasectl.migrate'))) as taken
