-- Purpose: benchmark databases only (tests/bench/rules.py): the reference worker's calls without their
--   history: the journal's trigger of updates (leasectl_tool_jobs_journal; its two rows a call,
--   their guard and their WAL) dropped, to weigh what it costs a call.
-- Zero rows: always.
-- Parameters: none
drop trigger tool_jobs_journal_update on public.tool_jobs
