-- Purpose: insert one fixture agent with its times and state given (exact mode only); its
--   generation and the agent it replaces (migration 0018) as given, 1 and none by default.
-- Zero rows: never.
-- Parameters: id, parent_id, kind, state, started_at, last_seen_at, terminated_confirmed_at,
--   generation, replaces (both optional)
-- Optional: generation, replaces
insert into agents (id, parent_id, kind, state, started_at, last_seen_at, terminated_confirmed_at, generation,
                    replaces)
values (:id::text, :parent_id::text, :kind::text, :state::text, :started_at::timestamptz,
        :last_seen_at::timestamptz, :terminated_confirmed_at::timestamptz, coalesce(:generation::integer, 1),
        :replaces::text)
returning id
