-- Purpose: change the statement timeout for the rest of the current transaction only (is_local):
--   `leasectl jobs --at --json` lifts it (0) for the one statement that streams every call, whose
--   length is the reader's as much as the server's (a pipe into gzip, a terminal over ssh); Ctrl-C
--   and SIGTERM still cancel it on the server.
-- Zero rows: never (one row: the value now in effect).
-- Parameters: statement_timeout
select set_config('statement_timeout', :statement_timeout::text, true) as statement_timeout
