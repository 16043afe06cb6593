-- Purpose: the demo's "long transaction": lock one call's row (FOR NO KEY UPDATE) inside a
--   transaction the caller keeps open, the way a forgotten session or a slow batch job does, so
--   that an operator action on that call meets lock_timeout.
-- Zero rows: no such call.
-- Parameters: job_id
select id from tool_jobs where id = :job_id::uuid for no key update
