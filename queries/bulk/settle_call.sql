-- Purpose: record one call's outcome in a bulk operation, in the transaction that sent it: the
--   database takes it from the journal row the call's guarded statement wrote for it in this
--   transaction under the operation's batch id (applied, or refused with the guard's why;
--   operator_action_failed: failed), never from the client, and records that row's request id.
--   `error` is what the worker met when the statement never reached its guard and the failure could
--   not be journaled (the call was not acted on: failed); null otherwise. A call that no longer
--   exists is refused. The operation's counters follow at commit.
-- Zero rows: never. A call that is not an unsettled call of the operation is an error (55000),
--   which undoes the batch.
-- Parameters: operation_id, job_id, error, worker
select outcome, why, request_id
from leasectl_bulk_settle(:operation_id::uuid, :job_id::uuid, :error::text, :worker::text)
