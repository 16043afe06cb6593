-- Purpose: register a tool (or update its class and lease sizing). The database refuses a
--   sizing that breaks L > R x H + J (check constraint tools_lease_sizing).
-- Zero rows: never.
-- Parameters: name, side_effect, lease_seconds, heartbeat_seconds, missed_heartbeats,
--   jitter_seconds, max_attempts, stage_timeout_seconds, description, min_time_left_seconds (a call
--   with less time left before its deadline is not started; default 0), service (the external
--   service it calls, a metrics grouping)
-- Optional: min_time_left_seconds, service
insert into tools (name, side_effect, lease_seconds, heartbeat_seconds, missed_heartbeats,
                   jitter_seconds, max_attempts, stage_timeout_seconds, description, auto_registered,
                   min_time_left_seconds, service)
values (:name::text, :side_effect::text, :lease_seconds::numeric, :heartbeat_seconds::numeric,
        :missed_heartbeats::integer, :jitter_seconds::numeric, :max_attempts::integer,
        :stage_timeout_seconds::numeric, :description::text, false,
        coalesce(:min_time_left_seconds::numeric, 0), :service::text)
on conflict (name) do update
set side_effect           = excluded.side_effect,
    lease_seconds         = excluded.lease_seconds,
    heartbeat_seconds     = excluded.heartbeat_seconds,
    missed_heartbeats     = excluded.missed_heartbeats,
    jitter_seconds        = excluded.jitter_seconds,
    max_attempts          = excluded.max_attempts,
    stage_timeout_seconds = excluded.stage_timeout_seconds,
    description           = excluded.description,
    auto_registered       = false,
    min_time_left_seconds = excluded.min_time_left_seconds,
    service               = excluded.service
returning name, side_effect, lease_seconds, heartbeat_seconds, missed_heartbeats, jitter_seconds,
          max_attempts, stage_timeout_seconds, min_time_left_seconds, service
