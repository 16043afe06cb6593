-- Purpose: subscribe this (dedicated) connection to state and owner changes of calls, which
--   the journal trigger announces on channel leasectl_jobs (never on a plain heartbeat).
-- Zero rows: always.
-- Parameters: none
listen leasectl_jobs
