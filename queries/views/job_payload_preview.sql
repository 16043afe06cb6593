-- Purpose: what the call detail shows when the payload is revealed: the real size of the payload
--   and the result as text, and a bounded, pretty-printed beginning of each. A 6 MB payload costs
--   the console :max_chars characters, not 6 MB (the rest: `leasectl show ID --json`, or export).
-- Zero rows: no such call.
-- Parameters: job_id, max_chars
select octet_length(j.payload::text) as payload_bytes,
       left(jsonb_pretty(j.payload), :max_chars::integer) as payload_preview,
       octet_length(j.result::text) as result_bytes,
       left(jsonb_pretty(j.result), :max_chars::integer) as result_preview
from tool_jobs j
where j.id = :job_id::uuid
