-- Purpose: behind a connection pooler, have the server write dates in ISO for this client
--   (psycopg reads no other; the order of day and month the server had is kept), as
--   meta/session_setup.sql does for a session of our own. A session setting, on purpose: DateStyle
--   is one of the parameters a pooler keeps per client (PgBouncer tracks client_encoding,
--   DateStyle, TimeZone, standard_conforming_strings and application_name, and sets them again
--   on whichever server connection the client gets), and psycopg reads it when a result arrives,
--   after the transaction that a local setting would have lasted.
-- Zero rows: never.
-- Parameters: none
select set_config('DateStyle', 'ISO, ' || split_part(current_setting('DateStyle'), ', ', 2), false) as datestyle
