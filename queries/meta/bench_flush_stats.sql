-- Purpose: flush this session's table statistics now (PostgreSQL 15+), so a benchmark reads
--   them without waiting for the periodic flush.
-- Zero rows: never.
-- Parameters: none
select pg_stat_force_next_flush() is null as flushed
