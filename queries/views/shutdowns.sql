-- Purpose: shutdowns as the Fleet screen shows them: those under way first, with the phase
--   and the time left in its window (by the database clock), then the most recent finished.
--   With id_low and id_high, those whose id lies between (one id: both the same; an id's prefix:
--   the range it covers, as views/grant.sql). Proposals (migration 0018) come first: nothing happens to
--   them until a human decides; each shows who proposed it and why, and who decided. A shutdown
--   that names a replacement says how many calls it moved to it.
-- Zero rows: no shutdown was ever requested or proposed (or none in that range).
-- Parameters: id_low, id_high (both null for all), limit
select s.id, s.root_agent_id, s.mode, s.state, s.requested_by, s.reason, s.requested_at,
       s.window_seconds::float8 as window_seconds, s.draining_at, s.aborting_at, s.reconciling_at,
       s.finished_at, s.replacement_agent_id, s.decided_by, s.decided_at,
       (select count(*) from fleet_events e
        where e.shutdown_id = s.id and e.kind = 'call_moved') as calls_moved,
       (select count(*) from leasectl_subtree(s.root_agent_id)) as agents,
       case s.state when 'draining' then s.draining_at
                    when 'aborting' then s.aborting_at
                    when 'reconciling' then s.reconciling_at end as phase_started_at,
       -- the current phase's window: reconciling waits for confirmations at most 60 seconds
       (case when s.state = 'reconciling' then least(s.window_seconds, 60) else s.window_seconds end)::float8
           as phase_window_seconds,
       extract(epoch from
           case s.state when 'draining' then s.draining_at
                        when 'aborting' then s.aborting_at
                        when 'reconciling' then s.reconciling_at end
           + case when s.state = 'reconciling' then least(s.window_seconds, 60) else s.window_seconds end
             * interval '1 second' - leasectl_now())::float8 as window_left_seconds,
       r.id as record_id,
       jsonb_array_length(r.children_unaccounted) as unaccounted,
       leasectl_now() as db_now
from shutdowns s
left join reconciliation_records r on r.shutdown_id = s.id
where :id_low::uuid is null or s.id between :id_low::uuid and :id_high::uuid
order by s.state <> 'proposed', s.state in ('terminated', 'declined'), s.requested_at desc
limit :limit::integer
