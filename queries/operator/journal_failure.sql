-- Purpose: journal an operator action that never got to its guard (the row was locked by
--   another transaction, or the statement timed out): the attempt, its operator and reason,
--   and why nothing changed. Written in its own transaction after the failed one.
-- Zero rows: no such call.
-- Parameters: job_id, action, operator, reason, error, seen_state, seen_token, request_id
insert into job_events (job_id, kind, actor, fencing_token, reason, request_id, details)
select j.id, 'operator_action_failed', :operator::text, j.fencing_token, :reason::text,
       :request_id::uuid,
       jsonb_build_object('action', :action::text, 'outcome', 'not_applied', 'error', :error::text,
                          'seen_state', :seen_state::text, 'seen_token', :seen_token::bigint)
from tool_jobs j
where j.id = :job_id::uuid
returning id, at
