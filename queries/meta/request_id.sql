-- Purpose: name the operator action this transaction carries out; the operator statements
--   journal it under this request id (else they make one up).
-- Zero rows: never.
-- Parameters: request_id
select set_config('leasectl.request_id', :request_id::text, true) as request_id
