-- Purpose: record a migration as applied with its checksum. A migration applied by psql -f
--   recorded itself without one; the first `leasectl migrate` afterwards fills it in.
-- Zero rows: never.
-- Parameters: version, name, checksum
insert into leasectl_migrations (version, name, checksum)
values (:version::integer, :name::text, :checksum::text)
on conflict (version) do update set checksum = excluded.checksum
    where leasectl_migrations.checksum is null
returning version, checksum
