-- Purpose: move a shutdown to its next phase, guarded by the phase the supervisor saw; stamps
--   when the phase began (its window counts from there) and, at the end, finished_at. The
--   database refuses an illegal transition (LCF02) and 'terminated' without its
--   reconciliation record (LCF03).
-- Zero rows: the shutdown is no longer in state_from (someone else moved it).
-- Parameters: shutdown_id, state_from, state_to
update shutdowns s
set state          = :state_to::text,
    draining_at    = case when :state_to::text = 'draining' then now() else s.draining_at end,
    aborting_at    = case when :state_to::text = 'aborting' then now() else s.aborting_at end,
    reconciling_at = case when :state_to::text = 'reconciling' then now() else s.reconciling_at end,
    finished_at    = case when :state_to::text = 'terminated' then now() else s.finished_at end
from (select set_config('leasectl.actor', 'control-plane', true)) as actor
where s.id = :shutdown_id::uuid
  and s.state = :state_from::text
returning s.id, s.state, s.draining_at, s.aborting_at, s.reconciling_at, s.finished_at
