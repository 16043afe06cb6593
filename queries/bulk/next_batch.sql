-- Purpose: the next batch of a bulk operation: up to `batch_size` of its unsettled calls, in their
--   order, each with the state and fencing token frozen for it, locked for this transaction (FOR
--   UPDATE SKIP LOCKED: another worker of the same operation -- the CLI and the supervisor at once --
--   gets other calls, never these). Run inside the batch's transaction, which then sends each call
--   through its action's guarded operator statement and records its outcome (bulk/settle_call.sql)
--   before it commits. The operation's key is share-locked too, so that stopping -> stopped
--   (bulk/close.sql) waits for this batch. An operator login or the control plane only.
-- Zero rows: nothing left to take now: every call is settled or held by another worker's batch, or
--   the operation is not running (stopping, stopped, finished), or there is no such operation.
-- Parameters: operation_id, batch_size
select job_id, seen_state, seen_token, ordinal
from leasectl_bulk_next(:operation_id::uuid, :batch_size::integer)
