-- Purpose: is this connection still alive? One round trip, no table read: sent before an action
--   goes out on a connection that has been idle (a server restart or pg_terminate_backend may
--   have killed it meanwhile), and by the metrics exporter when it serves cached values.
-- Zero rows: never (one row, the database's clock).
-- Parameters: none
select now() as db_now
