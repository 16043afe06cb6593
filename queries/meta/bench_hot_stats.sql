-- Purpose: updates and HOT updates of tool_jobs so far (heartbeats should be HOT).
-- Zero rows: never.
-- Parameters: none
select n_tup_upd, n_tup_hot_upd from pg_stat_user_tables where relname = 'tool_jobs'
