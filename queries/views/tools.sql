-- Purpose: the registered tools and their fair-share settings (migration 0016): whether each is
--   paused (since when, by whom, why), its caps (max_running), how many of its calls run now and
--   wait in the queue, and its hold (max_hold_seconds). Paused tools first, then by name. With
--   name, that tool only; with paused_only, the paused ones only (Triage, Metrics).
-- Zero rows: no tool is registered (or no tool of that name, or none paused).
-- Parameters: name, paused_only
select t.name, t.side_effect, t.max_attempts, t.max_running, t.max_hold_seconds,
       t.paused_at, t.paused_by, t.pause_reason, t.auto_registered,
       (select count(*) from tool_jobs j
        where j.tool = t.name and j.state in ('running', 'cancel_requested')) as running,
       (select count(*) from tool_jobs j where j.tool = t.name and j.state = 'queued') as queued
from tools t
where (:name::text is null or t.name = :name::text)
  and (not :paused_only::boolean or t.paused_at is not null)
order by t.paused_at is null, t.name
