-- Purpose: one bulk operation as it is now: what it does (action, filter, choices, operator,
--   reason), its progress (total, done, applied, refused, failed, skipped), its state, who started
--   it (db_role), who asked it to stop, the last error a worker met, and the database's clock.
-- Zero rows: no such operation.
-- Parameters: operation_id
select o.*, now() as db_now
from bulk_operations o
where o.id = :operation_id::uuid
