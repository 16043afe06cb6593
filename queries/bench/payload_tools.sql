-- Purpose: benchmark and test databases only: the five tools of queries/bench/payload_calls.sql.
-- Zero rows: the five tools were registered already.
-- Parameters: none
insert into tools (name, side_effect, lease_seconds, heartbeat_seconds, missed_heartbeats, jitter_seconds,
                   max_attempts, description, auto_registered)
select name, side_effect, 60, 10, 2, 10, 3, 'payload benchmark', false
from (values ('bench_pay', 'mutating_unverifiable'), ('bench_search', 'read_only'), ('bench_fetch', 'read_only'),
             ('bench_browse', 'read_only'), ('bench_sql', 'mutating_verifiable')) as t(name, side_effect)
on conflict (name) do nothing
returning name
