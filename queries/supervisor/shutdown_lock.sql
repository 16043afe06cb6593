-- Purpose: take one shutdown for the rest of this transaction, so that two supervisors never
--   carry out the same step at once, and read it as it is now: its phase, when that phase
--   began, and whether the phase's window is over (by the database clock; reconciling waits
--   for confirmations at most 60 seconds).
-- Zero rows: another supervisor holds it right now (it is doing the work), or it is terminated,
--   declined or only proposed (nothing carries out a proposal before a human accepts it).
-- Parameters: shutdown_id
select s.id, s.root_agent_id, s.mode, s.state, s.requested_by, s.reason, s.requested_at, s.replacement_agent_id,
       s.window_seconds, s.draining_at, s.aborting_at, s.reconciling_at,
       -- reconciling waits for agents' confirmations at most a minute: by then every call is
       -- resolved, and a silent agent must not hold back the record (it is listed unaccounted)
       coalesce(case s.state when 'draining' then s.draining_at
                             when 'aborting' then s.aborting_at
                             when 'reconciling' then s.reconciling_at end
                + case when s.state = 'reconciling' then least(s.window_seconds, 60) else s.window_seconds end
                  * interval '1 second' <= now(), false) as window_over
from shutdowns s
where s.id = :shutdown_id::uuid
  and s.state in ('requested', 'draining', 'aborting', 'reconciling')  -- never a proposal (0018)
for no key update of s skip locked
