-- Purpose: fold the history events that are safely behind us (older than :lag_seconds, and no
--   transaction that could still add one below the watermark is running) into the metric totals
--   (leasectl_metrics_fold, migration 0008), and propose the next watermark. Run off the hot
--   path, by `leasectl metrics serve` every 30 s; harmless to run twice or from two exporters.
-- Zero rows: never: one row, how many events were folded and the watermark left.
-- Parameters: lag_seconds
select folded, folded_through
from leasectl_metrics_fold(:lag_seconds::float8 * interval '1 second')
