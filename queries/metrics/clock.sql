-- Purpose: the instant the metrics are computed at: the display clock (leasectl_now(), now()
--   unless the session pinned it). Read first, in the same snapshot, and passed to groups.sql
--   as a value, so that the window is known when it is planned (job_events_metrics_idx of
--   migration 0008 then reads only the window, never the history).
-- Zero rows: never.
-- Parameters: none
select leasectl_now() as now
