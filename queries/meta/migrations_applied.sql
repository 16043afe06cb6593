-- Purpose: the migrations this database has, in order, with their recorded checksums.
-- Zero rows: a database leasectl never migrated.
-- Parameters: none
select version, name, checksum, applied_at, applied_by
from leasectl_migrations
order by version
