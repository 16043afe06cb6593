-- Purpose: make the current transaction a read-only snapshot, so that the several reads of
--   one console refresh (counts and rows) agree with each other. Must be the first statement.
-- Zero rows: always.
-- Parameters: none
set transaction isolation level repeatable read, read only
