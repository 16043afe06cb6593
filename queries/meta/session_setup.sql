-- Purpose: configure one of leasectl's own sessions: timeouts so that a console or worker
--   never holds a lock or a snapshot for long, read-only mode when asked, how prepared
--   statements are planned (force_custom_plan: with the values of each run; see SessionLimits),
--   the memory of a sort or hash (work_mem; null keeps the server's), and dates written in ISO
--   (DateStyle: psycopg reads no other; the order of day and month the server had is kept).
-- Zero rows: never (one row of the values now in effect).
-- Parameters: statement_timeout, lock_timeout, idle_in_transaction_session_timeout, read_only,
--   plan_cache_mode, work_mem
select set_config('statement_timeout', :statement_timeout::text, false) as statement_timeout,
       set_config('lock_timeout', :lock_timeout::text, false) as lock_timeout,
       set_config('idle_in_transaction_session_timeout',
                  :idle_in_transaction_session_timeout::text, false) as idle_in_transaction_session_timeout,
       set_config('default_transaction_read_only', :read_only::text, false) as read_only,
       set_config('plan_cache_mode', :plan_cache_mode::text, false) as plan_cache_mode,
       case when :work_mem::text is null then current_setting('work_mem')
            else set_config('work_mem', :work_mem::text, false) end as work_mem,
       -- psycopg reads dates only in ISO; a server whose DateStyle is SQL or German must not break us
       set_config('DateStyle', 'ISO, ' || split_part(current_setting('DateStyle'), ', ', 2), false) as datestyle
