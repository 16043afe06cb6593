-- Purpose: a call's payload and result, whole, for `leasectl show --json` (machines get
--   everything; people get views/job_payload_preview.sql).
-- Zero rows: no such call.
-- Parameters: job_id
select j.payload, j.result
from tool_jobs j
where j.id = :job_id::uuid
