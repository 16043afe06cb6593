-- Purpose: does this database have leasectl's migration ledger (has it ever been migrated)?
-- Zero rows: never.
-- Parameters: none
select to_regclass('leasectl_migrations') is not null as present
