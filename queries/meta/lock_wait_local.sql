-- Purpose: how long the current transaction's next waits may last, for the rest of that
--   transaction only (is_local): `leasectl migrate` waits for another migrator's lock for as long
--   as a migration may take (a wait is bounded by both timeouts: the lock's and the statement's),
--   then sets its session's own bounds back for the migrations' table locks.
-- Zero rows: never (one row: the values now in effect).
-- Parameters: lock_timeout, statement_timeout
select set_config('lock_timeout', :lock_timeout::text, true) as lock_timeout,
       set_config('statement_timeout', :statement_timeout::text, true) as statement_timeout
