-- Purpose: set a tool's fair-share limits (migration 0016), both at once (null clears one):
--   max_running, the most of its calls that run at once (a claim from the queue never goes past
--   it), and max_hold_seconds, how long one claim may hold a call (no lease outlives it). Takes
--   effect at the next claim; calls running now keep the hold they were granted. Run by the
--   schema's owner (tools is not written by workers or operators).
-- Zero rows: no such tool.
-- Parameters: name, max_running, max_hold_seconds
update tools
set max_running      = :max_running::integer,
    max_hold_seconds = :max_hold_seconds::numeric
where name = :name::text
returning name, max_running, max_hold_seconds
