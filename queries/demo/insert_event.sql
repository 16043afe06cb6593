-- Purpose: insert one fixture history event with its time given (exact mode only).
-- Zero rows: never.
-- Parameters: job_id, at, kind, actor, fencing_token, state_from, state_to, owner_from, owner_to,
--   lease_until, reason, request_id, details
insert into job_events (job_id, at, kind, actor, fencing_token, state_from, state_to, owner_from, owner_to,
                        lease_until, reason, request_id, details)
values (:job_id::uuid, :at::timestamptz, :kind::text, :actor::text, :fencing_token::bigint,
        :state_from::text, :state_to::text, :owner_from::text, :owner_to::text, :lease_until::timestamptz,
        :reason::text, :request_id::uuid, coalesce(:details::jsonb, '{}'::jsonb))
returning id
