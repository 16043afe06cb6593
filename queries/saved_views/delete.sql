-- Purpose: delete a saved view (migration 0022): this login's personal view of that name (shared
--   false), or the shared view of that name (shared true). Row level security lets a login delete
--   only the views it saved; the schema owner and superusers, whom it does not bind, may delete
--   any shared view (a login that left). One row: the view as it was, `deleted` whether it is gone
--   now (false: it is another login's shared view, kept: `db_role` and `created_by` say whose).
-- Zero rows: no such view visible to this login (no personal view of that name of its own, or no
--   shared view of that name): nothing was deleted.
-- Parameters: name, shared
with seen as (
    select v.id, v.name, v.screen, v.filter, v.shared, v.created_by, v.created_at, v.db_role, v.updated_by,
           v.updated_at
    from saved_views v
    where v.name = :name::text and v.shared = :shared::boolean
      and (v.shared or v.db_role = session_user)
), gone as (
    delete from saved_views v
    using seen s
    where v.id = s.id
    returning v.id
)
select s.name, s.screen, s.filter, s.shared, s.created_by, s.created_at, s.db_role, s.updated_by, s.updated_at,
       s.db_role = session_user as mine, exists (select 1 from gone g where g.id = s.id) as deleted
from seen s
