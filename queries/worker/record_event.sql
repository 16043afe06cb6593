-- Purpose: append a worker event to a call's history (tool_request_started for a request that
--   marks no side effect, heartbeat_lost, ownership_unknown, result_rejected, receiver_rejected,
--   ...). Ownership and state kinds (and side_effect_started, the old name of the start the
--   trigger journals) are written by the database itself and are refused here (LCH02), and so
--   are operator kinds. A worker event reports: it carries no state, owner or request id. From a leasectl_worker login the actor must be its own worker id (`login`
--   or `login:<name>`) and that id must have held the call under fencing_token (a claim or a
--   reclaim with that token), which stays true after the lease is lost; else LCH03. The
--   database records the login in db_role.
-- Zero rows: no such call.
-- Parameters: job_id, kind, actor, fencing_token, details (jsonb or null)
insert into job_events (job_id, kind, actor, fencing_token, details)
select :job_id::uuid, :kind::text, :actor::text, :fencing_token::bigint,
       coalesce(:details::jsonb, '{}'::jsonb)
where exists (select 1 from tool_jobs where id = :job_id::uuid)
returning id, at
