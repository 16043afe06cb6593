-- Purpose: behind a connection pooler in transaction mode (PgBouncer's pool_mode = transaction),
--   what meta/session_setup.sql, meta/assume_auditor.sql and meta/display_clock.sql set once for
--   a session of our own, set for the current transaction only (is_local): between transactions
--   the pooler hands the server connection to other clients, so a session setting would be absent
--   from our next transaction and present in theirs. Sent in the same round trip as the
--   transaction's first statement (before it, or after a SET TRANSACTION, which must come first).
--   transaction_read_only, not default_transaction_read_only: the transaction has begun. The role
--   is always set, to leasectl_auditor or back to the login ('none'): a SET ROLE another client
--   of the same login left on the server connection is not ours to run under.
-- Zero rows: never (one row of the values now in effect).
-- Parameters: statement_timeout, lock_timeout, idle_in_transaction_session_timeout, plan_cache_mode,
--   work_mem (null keeps the server's), read_only, role (null: the login's own), clock (null: now())
select set_config('statement_timeout', :statement_timeout::text, true) as statement_timeout,
       set_config('lock_timeout', :lock_timeout::text, true) as lock_timeout,
       set_config('idle_in_transaction_session_timeout',
                  :idle_in_transaction_session_timeout::text, true) as idle_in_transaction_session_timeout,
       set_config('plan_cache_mode', :plan_cache_mode::text, true) as plan_cache_mode,
       case when :work_mem::text is null then current_setting('work_mem')
            else set_config('work_mem', :work_mem::text, true) end as work_mem,
       set_config('role', coalesce(:role::text, 'none'), true) as role,
       case when :read_only::boolean then set_config('transaction_read_only', 'on', true)
            else current_setting('transaction_read_only') end as read_only,
       set_config('leasectl.clock', coalesce(:clock::text, ''), true) as clock
