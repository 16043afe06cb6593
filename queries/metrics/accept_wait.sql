-- Purpose: the histogram leasectl_accept_wait_seconds of `leasectl metrics serve`: for the claims
--   from the queue (the `claimed` events queue_wait counts) with ids in (:after, :through], per
--   tool, model, provider and bucket (le, leasectl_metric_bucket), how many, and the sum of their
--   waits since the call was accepted upstream (tool_jobs.accepted_at, migration 0014). The rollup
--   of migration 0008 does not hold this metric (leasectl_metric_events, which the fold counts,
--   would need a migration), so the exporter folds it itself, by the rollup's own watermark:
--   claims up to leasectl_metric_folds.folded_through are read once and kept in the exporter
--   (console/core/metrics.py AcceptWaitTotals), the tail after it on every scrape, through the
--   primary key from the watermark on. Rows shaped like totals.sql's ('' for a missing label).
-- Zero rows: no claim in that range.
-- Parameters: after, through (job_events ids)
select 'accept_wait' as metric, j.tool, coalesce(j.model, '') as model, coalesce(j.provider, '') as provider,
       leasectl_metric_bucket(w.seconds) as le, count(*)::bigint as n, coalesce(sum(w.seconds), 0)::float8 as seconds,
       leasectl_metric_buckets() as buckets
from job_events e
join tool_jobs j on j.id = e.job_id
cross join lateral (select greatest(0, extract(epoch from e.at - j.accepted_at))::float8 as seconds) w
where e.id > :after::bigint and e.id <= :through::bigint
  and e.kind = 'claimed'
group by j.tool, 3, 4, 5
order by j.tool, 3, 4, 5
