-- Purpose: indexes on tool_jobs that cover lease_until or heartbeat_at (in their columns,
--   expressions or predicate). Any of them makes every heartbeat write index entries instead
--   of a HOT update.
-- Zero rows: heartbeats can stay HOT.
-- Parameters: none
select i.relname as index_name, pg_get_indexdef(i.oid) as definition
from pg_index x
join pg_class i on i.oid = x.indexrelid
where x.indrelid = to_regclass('tool_jobs')
  and pg_get_indexdef(i.oid) ~ '\m(lease_until|heartbeat_at)\M'
