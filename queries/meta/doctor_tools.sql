-- Purpose: tools whose lease sizing breaks or barely meets L > R x H + J, and tools that were
--   registered automatically (unknown side-effect class, treated as unverifiable).
-- Zero rows: every tool is sized with room to spare and registered on purpose.
-- Parameters: none
select name, side_effect, lease_seconds, heartbeat_seconds, missed_heartbeats, jitter_seconds,
       missed_heartbeats * heartbeat_seconds + jitter_seconds as minimum,
       case
           when lease_seconds <= missed_heartbeats * heartbeat_seconds + jitter_seconds then 'broken'
           when auto_registered then 'auto_registered'
           else 'tight'
       end as problem
from tools
where lease_seconds <= missed_heartbeats * heartbeat_seconds + jitter_seconds
   or lease_seconds < 1.2 * (missed_heartbeats * heartbeat_seconds + jitter_seconds)
   or auto_registered
order by name
