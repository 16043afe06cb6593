-- Purpose: save a view (migration 0022): a screen's filter under a name, personal (shared false:
--   this login's alone) or shared (every console login). The database records the login
--   (db_role); created_by is the operator's name. One row says what happened (`outcome`):
--     saved      a new view, the row as written;
--     replaced   replace was true and the view of that name was this login's: its screen and filter
--                are the new ones (updated_by, updated_at say who and when), its owner unchanged;
--     exists     replace was false and a view of that name is already there (this login's personal
--                one, or a shared one of anyone's): nothing was written, the row is the one there;
--     not_yours  replace was true but the shared view of that name is another login's: row level
--                security refused the change, nothing was written, the row is the one there.
--   A name names one view whatever its screen: a replacement may move it to another screen.
--   The filter is checked with its screen's grammar before this is sent (the database does not
--   parse it); the name, screen and filter are bounded by the table's checks (23514).
-- Zero rows: another session saved a view of this name at the same moment (its row won the unique
--   index): nothing was written; save again to see it (with replace to overwrite it).
-- Parameters: name, screen, filter, shared, created_by, replace
with existing as (
    select v.id, v.name, v.screen, v.filter, v.shared, v.created_by, v.created_at, v.db_role, v.updated_by,
           v.updated_at
    from saved_views v
    where v.name = :name::text and v.shared = :shared::boolean
      and (v.shared or v.db_role = session_user)
), replaced as (
    update saved_views v
    set screen = :screen::text, filter = :filter::text, updated_by = :created_by::text
    from existing e
    where v.id = e.id and :replace::boolean
    returning v.name, v.screen, v.filter, v.shared, v.created_by, v.created_at, v.db_role, v.updated_by,
              v.updated_at
), inserted as (
    insert into saved_views (name, screen, filter, shared, created_by)
    select :name::text, :screen::text, :filter::text, :shared::boolean, :created_by::text
    where not exists (select 1 from existing)
    on conflict do nothing
    returning name, screen, filter, shared, created_by, created_at, db_role, updated_by, updated_at
)
select 'saved' as outcome, i.name, i.screen, i.filter, i.shared, i.created_by, i.created_at, i.db_role,
       i.updated_by, i.updated_at, i.db_role = session_user as mine
from inserted i
union all
select 'replaced', r.name, r.screen, r.filter, r.shared, r.created_by, r.created_at, r.db_role, r.updated_by,
       r.updated_at, r.db_role = session_user
from replaced r
union all
select case when :replace::boolean then 'not_yours' else 'exists' end, e.name, e.screen, e.filter, e.shared,
       e.created_by, e.created_at, e.db_role, e.updated_by, e.updated_at, e.db_role = session_user
from existing e
where not exists (select 1 from replaced)
