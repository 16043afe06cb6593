-- Purpose: for the rest of this transaction only (is_local), let PostgreSQL keep the plans of the
--   statements that the functions of a bulk operation's snapshot (views/jobs.sql) run once per call
--   (plan_cache_mode auto). The console's sessions plan every statement with its values
--   (force_custom_plan, console/shared/config.py), which planned leasectl_recently_rejected's probe
--   of the history again for every call: 3.3 s of the 3.6 s that 10,000 calls took, 0.3 s with
--   this. The snapshot's own statement is still planned with its values (a statement run fewer
--   than five times always is).
-- Zero rows: never (one row: the value now in effect).
-- Parameters: none
select set_config('plan_cache_mode', 'auto', true) as plan_cache_mode
