-- Purpose: append a worker event to a call's history (tool_request_started for a request that
--   marks no side effect, heartbeat_lost, ownership_unknown, result_rejected, receiver_rejected,
--   ...). Ownership and state kinds (and side_effect_started, the old name of the start the
--   trigger journals) are written by the database itself and are refused here (LCH02), and so
--   are operator kinds. A worker event reports: it carries no state, owner or request id. From a leasectl_worker login the actor must be its own worker id (`login`
--   or `login:<name>`) and that id must have held the call under fencing_token (a claim or a
--   reclaim with that token), which stays true after the lease is lost; else LCH03. The
--   database records the login in db_role.
--   A stale write refused or trouble met (heartbeat_lost, result_rejected, receiver_rejected,
--   ownership_unknown, database_error) is announced on channel leasectl_jobs at commit, so that
--   every console shows it at once (notified = true); other kinds wait for the console's poll
--   (migration 0009 says what NOTIFY is for).
-- Zero rows: no such call.
-- Parameters: job_id, kind, actor, fencing_token, details (jsonb or null)
with recorded as (
    insert into job_events (job_id, kind, actor, fencing_token, details)
    select :job_id::uuid, :kind::text, :actor::text, :fencing_token::bigint,
           coalesce(:details::jsonb, '{}'::jsonb)
    where exists (select 1 from tool_jobs where id = :job_id::uuid)
    returning id, at, job_id, kind
)
select r.id, r.at, n.sent is not null as notified
from recorded r
left join lateral (
    select true as sent, pg_notify('leasectl_jobs', json_build_object('id', r.job_id, 'kind', r.kind)::text)
    where r.kind in ('heartbeat_lost', 'result_rejected', 'receiver_rejected', 'ownership_unknown',
                     'database_error')
) n on true
