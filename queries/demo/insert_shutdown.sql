-- Purpose: insert one fixture shutdown (or proposal, migration 0018) with its times and state given
--   (exact mode only).
-- Zero rows: never.
-- Parameters: id, root_agent_id, mode, state, requested_by, reason, requested_at, window_seconds,
--   draining_at, aborting_at, reconciling_at, finished_at, replacement_agent_id, decided_by,
--   decided_at (the last three optional)
-- Optional: replacement_agent_id, decided_by, decided_at
insert into shutdowns (id, root_agent_id, mode, state, requested_by, reason, requested_at, window_seconds,
                       draining_at, aborting_at, reconciling_at, finished_at, replacement_agent_id, decided_by,
                       decided_at)
values (:id::uuid, :root_agent_id::text, :mode::text, :state::text, :requested_by::text, :reason::text,
        :requested_at::timestamptz, :window_seconds::numeric, :draining_at::timestamptz,
        :aborting_at::timestamptz, :reconciling_at::timestamptz, :finished_at::timestamptz,
        :replacement_agent_id::text, :decided_by::text, :decided_at::timestamptz)
returning id
