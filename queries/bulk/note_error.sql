-- Purpose: keep the last error a worker met on a bulk operation (a batch that could not commit,
--   so nothing of it was applied: the database went away, a permission the login lacks), shown
--   with the operation's progress until a later error replaces it.
-- Zero rows: no such operation.
-- Parameters: operation_id, error, worker
select id, error, error_at
from leasectl_bulk_note_error(:operation_id::uuid, :error::text, :worker::text)
