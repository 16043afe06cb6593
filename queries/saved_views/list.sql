-- Purpose: the saved views this login may open (migration 0022): its own personal views and every
--   shared view, of one screen (screen) or of every screen (screen null); by screen, personal
--   before shared, then by name. `mine`: this login saved it (it alone may replace or delete it).
--   Row level security hides other logins' personal views; the WHERE clause says the same, so a
--   session row level security does not bind (the schema owner, a superuser) lists what a login
--   would, not every login's personal views. The filter comes as typed: the console parses it
--   with its screen's grammar and says why one no longer parses (console/core/saved_views.py).
-- Zero rows: no view (of that screen) is visible to this login.
-- Parameters: screen
-- Optional: screen
select v.name, v.screen, v.filter, v.shared, v.created_by, v.created_at, v.db_role, v.updated_by, v.updated_at,
       v.db_role = session_user as mine
from saved_views v
where (v.shared or v.db_role = session_user)
  and (:screen::text is null or v.screen = :screen::text)
order by v.screen, v.shared, v.name, v.db_role
