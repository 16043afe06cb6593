-- Purpose: benchmark servers only (tests/bench/rules.py): the server's write-ahead log position,
--   in bytes, to count what a run wrote to it.
-- Zero rows: never.
-- Parameters: none
select (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint as bytes
