-- Purpose: the counters and histograms of `leasectl metrics serve`: totals over the whole
--   history, per metric, tool, model, provider and histogram bucket (le; +Inf for counters).
--   The rollup (leasectl_metric_totals, migration 0008) plus the events after its watermark
--   (:after, read by folds.sql in the same snapshot), so every event is counted exactly once; the
--   tail is read through the primary key from the watermark on, so the cost follows what was not
--   folded yet, not the history. Bucket counts are per bucket, not cumulative; seconds is the sum
--   of observations. '' stands for a missing label.
-- Zero rows: nothing was ever counted.
-- Parameters: after (leasectl_metric_folds.folded_through)
with tail as (
    select m.metric, coalesce(m.tool, '') as tool, coalesce(m.model, '') as model,
           coalesce(m.provider, '') as provider, leasectl_metric_bucket(m.seconds) as le,
           count(*) as n, coalesce(sum(m.seconds), 0) as seconds
    from leasectl_metric_events(:after::bigint, 9223372036854775807, '-infinity', 'infinity') m
    group by 1, 2, 3, 4, 5
),
everything as (
    select metric, tool, model, provider, le, n, seconds from leasectl_metric_totals
    union all
    select metric, tool, model, provider, le, n, seconds from tail
)
select metric, tool, model, provider, le, sum(n)::bigint as n, sum(seconds)::float8 as seconds,
       leasectl_metric_buckets() as buckets
from everything
group by metric, tool, model, provider, le
order by metric, tool, model, provider, le
