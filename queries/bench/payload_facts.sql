-- Purpose: benchmark databases only (tests/bench/payload.py): what the payload search runs over --
--   the calls, the heap, the payloads stored out of line (TOAST), the indexes, the payloads' sizes.
-- Zero rows: never.
-- Parameters: none
select (select count(*) from tool_jobs) as calls,
       pg_relation_size('tool_jobs') as heap_bytes,
       coalesce(pg_total_relation_size(nullif(t.reltoastrelid, 0)), 0) as toast_bytes,
       pg_indexes_size('tool_jobs') as index_bytes,
       (select avg(pg_column_size(payload))::integer from tool_jobs) as payload_avg_bytes,
       (select avg(length(payload::text))::integer from tool_jobs) as payload_avg_chars,
       (select count(*) from tool_jobs where pg_column_size(payload) > 2000) as large_payloads
from pg_class t
where t.oid = 'tool_jobs'::regclass
