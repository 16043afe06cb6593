-- Purpose: pin this session's display clock (leasectl_now(), used by the read views only)
--   to an instant, or back to now() with null. For snapshot tests and screenshots.
-- Zero rows: never.
-- Parameters: clock
select set_config('leasectl.clock', coalesce(:clock::text, ''), false) as clock
