-- Purpose: append a worker event to a call's history (tool_request_started, heartbeat_lost,
--   ownership_unknown, result_rejected, ...). Ownership and state kinds are written by the
--   database itself and are refused here.
-- Zero rows: no such call.
-- Parameters: job_id, kind, actor, fencing_token, details (jsonb or null)
insert into job_events (job_id, kind, actor, fencing_token, details)
select :job_id::uuid, :kind::text, :actor::text, :fencing_token::bigint,
       coalesce(:details::jsonb, '{}'::jsonb)
where exists (select 1 from tool_jobs where id = :job_id::uuid)
returning id, at
