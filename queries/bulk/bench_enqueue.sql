-- Purpose: benchmark databases only (tests/bench/bulk.py): `count` queued calls of `tool` in one
--   statement (keys bulk:<prefix>:1 .. bulk:<prefix>:<count>), for a bulk action to act on once
--   workers have claimed them (worker/claim_many.sql). Needs a session that may insert calls.
-- Zero rows: always.
-- Parameters: tool, prefix, count
insert into tool_jobs (idempotency_key, payload, tool)
select 'bulk:' || :prefix::text || ':' || n, jsonb_build_object('n', n), :tool::text
from generate_series(1, :count::integer) n
