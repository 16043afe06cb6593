-- Purpose: journal an operator action that never got to its guard (the row was locked by
--   another transaction, or the statement timed out): the attempt, its operator and reason,
--   and why nothing changed -- details.cause is lock_timeout (SQLSTATE 55P03) or
--   statement_timeout (57014), so that lock waits and heavy statements can be told apart.
--   Written in its own transaction after the failed one, by the SECURITY DEFINER function
--   leasectl_journal_failure (operators do not insert into job_events themselves).
-- Zero rows: no such call.
-- Parameters: job_id, action, operator, reason, error, seen_state, seen_token, request_id,
--   cause (lock_timeout, statement_timeout, or null when unknown)
select id, at
from leasectl_journal_failure(:job_id::uuid, :action::text, :operator::text, :reason::text,
                              :error::text, :seen_state::text, :seen_token::bigint,
                              :request_id::uuid, :cause::text)
