-- Purpose: an operator stops a bulk operation: running -> stopping. The batches in flight finish;
--   no new batch begins; bulk/close.sql then makes it stopped. Journaled as fleet_events
--   bulk_stop_requested; a stop of an operation that is over (stopped, finished) is journaled as
--   bulk_stop_refused. An operator login only (leasectl_bulk_stop).
-- Zero rows: not stopped by this statement: no such operation (nothing journaled), stopping
--   already, or over (refused, journaled).
-- Parameters: operation_id, operator, reason
select *
from leasectl_bulk_stop(:operation_id::uuid, :operator::text, :reason::text)
