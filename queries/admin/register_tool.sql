-- Purpose: register a tool (or update its class and lease sizing). The database refuses a
--   sizing that breaks L > R x H + J (check constraint tools_lease_sizing).
-- Zero rows: never.
-- Parameters: name, side_effect, lease_seconds, heartbeat_seconds, missed_heartbeats,
--   jitter_seconds, max_attempts, stage_timeout_seconds, description
insert into tools (name, side_effect, lease_seconds, heartbeat_seconds, missed_heartbeats,
                   jitter_seconds, max_attempts, stage_timeout_seconds, description, auto_registered)
values (:name::text, :side_effect::text, :lease_seconds::numeric, :heartbeat_seconds::numeric,
        :missed_heartbeats::integer, :jitter_seconds::numeric, :max_attempts::integer,
        :stage_timeout_seconds::numeric, :description::text, false)
on conflict (name) do update
set side_effect           = excluded.side_effect,
    lease_seconds         = excluded.lease_seconds,
    heartbeat_seconds     = excluded.heartbeat_seconds,
    missed_heartbeats     = excluded.missed_heartbeats,
    jitter_seconds        = excluded.jitter_seconds,
    max_attempts          = excluded.max_attempts,
    stage_timeout_seconds = excluded.stage_timeout_seconds,
    description           = excluded.description,
    auto_registered       = false
returning name, side_effect, lease_seconds, heartbeat_seconds, missed_heartbeats, jitter_seconds,
          max_attempts, stage_timeout_seconds
