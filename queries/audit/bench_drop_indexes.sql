-- Purpose: benchmark databases only (tests/bench/audit.py): remove the indexes migration 0007 added,
--   to time the write path without them beside a database that has them.
-- Zero rows: always.
-- Parameters: none
drop index if exists job_events_operator_idx, fleet_events_operator_idx, fleet_events_operator_at_idx
