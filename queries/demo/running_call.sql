-- Purpose: the demo's operator bot looks at one call by idempotency key (its state and token
--   are the guard it will use), the way a person reads the screen before acting.
-- Zero rows: no such call.
-- Parameters: idempotency_key
select id, state, fencing_token, owner_id from tool_jobs where idempotency_key = :idempotency_key::text
