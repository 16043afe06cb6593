-- Purpose: commit the results of several calls this worker holds, in one statement and one
--   commit (group commit): job_ids[i], under fencing_tokens[i], succeeds with results[i]. Each
--   under exactly complete.sql's guard (this owner, that token, a live lease, running or
--   cancel_requested), so a call whose lease was lost is simply not written, whatever the others
--   in the group; finishing after a cancel request is recorded as completed_despite_cancel (by
--   trigger), as from complete.sql. A worker tells a handler its result is stored only after
--   this statement's commit, and only for a call in its answer.
-- Zero rows: every result of the group was rejected (each lease lost). A call missing from the
--   answer: its result is rejected; log it (keep its hash), never report it as done.
-- Parameters: job_ids (uuid[]), worker_id, fencing_tokens (bigint[]), results (jsonb[]), the
--   arrays in the order of job_ids (a shorter array leaves the calls past its end unwritten)
update tool_jobs j
set state       = 'succeeded',
    result      = done.result,
    lease_until = null
from unnest(:job_ids::uuid[], :fencing_tokens::bigint[], :results::jsonb[]) as done (id, fencing_token, result)
where j.id = done.id
  and j.state in ('running', 'cancel_requested')
  and j.owner_id = :worker_id::text
  and j.fencing_token = done.fencing_token
  and j.lease_until > now()
returning j.id, j.state, j.completed_despite_cancel, j.finished_at
