-- Purpose: the database's owner sets one of leasectl's settings (leasectl_settings, migration 0016:
--   tools.allow_auto_register; migration 0018: fleet.orphan_after_seconds), stamped with who and
--   when. Only the owner may write the table; a name the database does not know is refused (23514).
-- Zero rows: never (an insert or an update of the one row).
-- Parameters: name, value
insert into leasectl_settings as s (name, value)
values (:name::text, :value::jsonb)
on conflict (name) do update
set value = excluded.value, changed_at = now(), changed_by = session_user
returning s.name, s.value, s.changed_at, s.changed_by
