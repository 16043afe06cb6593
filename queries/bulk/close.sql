-- Purpose: settle where a bulk operation ends up once no batch can begin: a stopping operation
--   becomes stopped (journaled as fleet_events bulk_stopped, with how many calls were not sent).
--   Takes the operation's row lock, so it waits for the batches in flight to commit first (their
--   key share locks): nothing is settled after an operation says it stopped. A running or finished
--   operation is left as it is (a running one finishes by itself when its last call is settled).
-- Zero rows: no such operation.
-- Parameters: operation_id, worker
select *
from leasectl_bulk_close(:operation_id::uuid, :worker::text)
