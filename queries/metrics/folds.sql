-- Purpose: where the metrics rollup stands (migration 0008): every history event with an id up
--   to folded_through is in leasectl_metric_totals; totals.sql reads the events after it. Read in
--   the same snapshot as totals.sql, and passed to it as a value so its plan walks the primary
--   key from the watermark on (a value known only inside the statement would plan a full scan).
-- Zero rows: never (migration 0008 writes the one row).
-- Parameters: none
select folded_through, folded_at from leasectl_metric_folds
