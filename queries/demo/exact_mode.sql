-- Purpose: write fixture rows exactly as given (fixed ids, times and history), bypassing the
--   triggers for this session. Superuser only; used to build the fixed screenshot scenario on a
--   throwaway server, never on a real one.
-- Zero rows: never.
-- Parameters: on
select set_config('session_replication_role', case when :on::boolean then 'replica' else 'origin' end,
                  false) as mode
