-- Purpose: tell a connection pooler from the server itself, on a new connection, before anything
--   is set: the server process that answers (compared with the process id the connection was
--   given at startup: a pooler such as PgBouncer hands each client a cancel key of its own, so the
--   two differ; straight to the server, or through a plain TCP proxy, they are the same), and
--   whether the server writes dates in ISO (psycopg reads no other).
-- Zero rows: never.
-- Parameters: none
select pg_backend_pid() as backend_pid,
       current_setting('DateStyle') like 'ISO%' as iso_dates
