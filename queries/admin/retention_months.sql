-- Purpose: `leasectl admin retention`: the months of job_events that ended at or before :cutoff,
--   oldest first, each a partition of its own (migration 0021: job_events_YYYY_MM over a UTC
--   month), with its bounds read from the catalog (never from its name) and an estimate of its
--   rows for the plan (the archive counts them exactly). The default partition is not a month.
-- Zero rows: no month old enough (nothing to archive).
-- Parameters: cutoff
select b.month, b.partition, b.range_from, b.range_to, case when c.reltuples >= 0 then c.reltuples::bigint end as estimated_rows
from pg_catalog.pg_inherits i
join pg_catalog.pg_class c on c.oid = i.inhrelid
cross join lateral (
    select substring(pg_catalog.pg_get_expr(c.relpartbound, c.oid) from $$FROM \('([^']+)'\)$$)::timestamptz
               as range_from,
           substring(pg_catalog.pg_get_expr(c.relpartbound, c.oid) from $$TO \('([^']+)'\)$$)::timestamptz
               as range_to
) r
cross join lateral (
    select (r.range_from at time zone 'UTC')::date as month, c.relname::text as partition,
           r.range_from, r.range_to
) b
where i.inhparent = 'public.job_events'::regclass
  and r.range_from is not null
  and r.range_to <= :cutoff::timestamptz
order by b.range_from
