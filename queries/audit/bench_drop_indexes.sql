-- Purpose: benchmark databases only (tests/bench/audit.py): remove the indexes migrations 0007
--   (the operator journal) and 0008 (the metrics window) added to job_events and fleet_events, to
--   time the write path without them beside a database that has them.
-- Zero rows: always.
-- Parameters: none
drop index if exists job_events_operator_idx, fleet_events_operator_idx, fleet_events_operator_at_idx,
    job_events_metrics_idx
