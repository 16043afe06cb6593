-- Purpose: `leasectl doctor`'s history check (migration 0021): how big the history online is, where
--   it begins, how fast it grows, whether the months ahead have their partitions and the default
--   partition is empty, and what retention archived. Cheap at any size: sizes and row estimates
--   from the catalog, the first and last event by the primary key (id order is time order), the
--   default partition read for at most one row.
-- Zero rows: never: one row.
-- Parameters: none
with months as (
    select c.oid,
           substring(pg_catalog.pg_get_expr(c.relpartbound, c.oid) from $$FROM \('([^']+)'\)$$)::timestamptz
               as range_from
    from pg_catalog.pg_inherits i
    join pg_catalog.pg_class c on c.oid = i.inhrelid
    where i.inhparent = 'public.job_events'::regclass
),
ends as (
    select (select e.id from job_events e order by e.id limit 1) as first_id,
           (select e.at from job_events e order by e.id limit 1) as first_at,
           (select e.id from job_events e order by e.id desc limit 1) as last_id,
           (select e.at from job_events e order by e.id desc limit 1) as last_at
)
select (select coalesce(sum(pg_catalog.pg_total_relation_size(m.oid)), 0) from months m)::bigint as bytes,
       -- what the growth is measured by: the months that hold rows (a month ahead's empty indexes
       -- are a fixed cost, which divided by a short history read as megabytes a day)
       (select coalesce(sum(pg_catalog.pg_total_relation_size(m.oid)), 0) from months m
        where pg_catalog.pg_relation_size(m.oid) > 0)::bigint as bytes_holding_rows,
       (select coalesce(sum(greatest(c.reltuples, 0)), 0) from months m
        join pg_catalog.pg_class c on c.oid = m.oid)::bigint as estimated_rows,
       ends.first_at, ends.last_at, ends.first_id, ends.last_id,
       (select min(m.range_from) from months m) as oldest_partition,
       (select max(m.range_from) from months m) as newest_partition,
       exists (select 1 from months m
               where m.range_from = date_trunc('month', now() at time zone 'UTC') at time zone 'UTC')
           as this_month,
       exists (select 1 from months m
               where m.range_from = (date_trunc('month', now() at time zone 'UTC') + interval '1 month')
                                    at time zone 'UTC') as next_month,
       exists (select 1 from job_events_default) as default_rows,
       leasectl_archived_before() as archived_before,
       (select count(*) from job_events_archive) as archived_months
from ends
