-- Purpose: name the bulk action this transaction belongs to; the operator statements journal
--   every call of it with this batch id (details.batch_id), so the batch reads as one act.
-- Zero rows: never.
-- Parameters: batch_id
select set_config('leasectl.batch_id', :batch_id::text, true) as batch_id
