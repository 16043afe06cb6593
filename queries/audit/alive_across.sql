-- Purpose: `leasectl jobs --at T` once history was archived (console/core/history.py): a call
--   created before archived_before (where the online history begins) and still alive at T (not
--   finished by then), whose state at T may rest on archived events -- the newest such call. Looked
--   for among the calls still unfinished (the partial indexes of the live and queued calls) and
--   then among those created before archived_before that finished after T (tool_jobs_created_idx
--   from archived_before back: the calls alive across the boundary are the newest of them).
-- Zero rows: every call created before archived_before had finished by T.
-- Parameters: at, archived_before
(select j.id, j.created_at, j.finished_at
 from tool_jobs j
 where j.state in ('running', 'cancel_requested', 'outcome_unknown')
   and j.created_at < :archived_before::timestamptz
 order by j.created_at desc
 limit 1)
union all
(select j.id, j.created_at, j.finished_at
 from tool_jobs j
 where j.state = 'queued' and j.created_at < :archived_before::timestamptz
 order by j.created_at desc
 limit 1)
union all
(select j.id, j.created_at, j.finished_at
 from tool_jobs j
 where j.created_at < :archived_before::timestamptz
   and j.finished_at > :at::timestamptz
 order by j.created_at desc
 limit 1)
limit 1
