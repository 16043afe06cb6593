-- Purpose: insert one fixture grant with its times given (exact mode only).
-- Zero rows: never.
-- Parameters: id, agent_id, kind, resource, issued_by, issued_at, expires_at, revoked_at, revoked_by
insert into grants (id, agent_id, kind, resource, issued_by, issued_at, expires_at, revoked_at, revoked_by)
values (:id::uuid, :agent_id::text, :kind::text, :resource::text, :issued_by::text, :issued_at::timestamptz,
        :expires_at::timestamptz, :revoked_at::timestamptz, :revoked_by::text)
returning id
