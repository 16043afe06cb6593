-- Purpose: `leasectl admin retention`: how long its detach may wait for the history's lock before
--   it gives up and tries again (a detach queued behind a long reader would hold every writer).
-- Zero rows: never (set_config returns the value).
-- Parameters: milliseconds
select set_config('lock_timeout', :milliseconds::text, false) as lock_timeout
