-- Purpose: insert one fixture agent with its times and state given (exact mode only).
-- Zero rows: never.
-- Parameters: id, parent_id, kind, state, started_at, last_seen_at, terminated_confirmed_at
insert into agents (id, parent_id, kind, state, started_at, last_seen_at, terminated_confirmed_at)
values (:id::text, :parent_id::text, :kind::text, :state::text, :started_at::timestamptz,
        :last_seen_at::timestamptz, :terminated_confirmed_at::timestamptz)
returning id
