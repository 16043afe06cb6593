-- Purpose: configure one of leasectl's own sessions: timeouts so that a console or worker
--   never holds a lock or a snapshot for long, read-only mode when asked, how prepared
--   statements are planned (force_custom_plan: with the values of each run; see SessionLimits),
--   and the memory of a sort or hash (work_mem; null keeps the server's).
-- Zero rows: never (one row of the values now in effect).
-- Parameters: statement_timeout, lock_timeout, idle_in_transaction_session_timeout, read_only,
--   plan_cache_mode, work_mem
select set_config('statement_timeout', :statement_timeout::text, false) as statement_timeout,
       set_config('lock_timeout', :lock_timeout::text, false) as lock_timeout,
       set_config('idle_in_transaction_session_timeout',
                  :idle_in_transaction_session_timeout::text, false) as idle_in_transaction_session_timeout,
       set_config('default_transaction_read_only', :read_only::text, false) as read_only,
       set_config('plan_cache_mode', :plan_cache_mode::text, false) as plan_cache_mode,
       set_config('work_mem', coalesce(:work_mem::text, current_setting('work_mem')), false) as work_mem
