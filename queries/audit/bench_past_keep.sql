-- Purpose: benchmark databases only (tests/bench/audit.py): a temporary table with the columns
--   and types of audit/jobs_at.sql's rows, to hold the calls it rebuilt, so that reading them back
--   (audit/bench_past_rows.sql) measures what delivering and validating that many rows costs on
--   this machine, without the rebuild: the ceiling `jobs --at` is compared with in the same run.
--   Filled by COPY (audit/bench_past_copy.sql).
-- Zero rows: always (DDL).
-- Parameters: none
create temporary table if not exists bench_past (
    id uuid, tool text, side_effect text, state text, owner_id text, lease_until timestamptz,
    fencing_token bigint, heartbeat_at timestamptz, attempt integer, max_attempts integer,
    idempotency_key text, payload_hash text, payload_size integer, agent_id text, session_id text,
    model text, provider text, created_at timestamptz, claimed_at timestamptz, finished_at timestamptz,
    deadline_at timestamptz, cancel_requested_at timestamptz, cancel_requested_by text,
    cancel_requested_reason text, side_effect_started_at timestamptz, external_request_id text,
    retry_approved_by text, retry_approved_at timestamptz, retry_approved_reason text, terminal_reason text,
    completed_despite_cancel boolean, lease_seconds numeric, heartbeat_seconds numeric, jitter_seconds numeric,
    stage_timeout_seconds numeric, health text, db_now timestamptz, as_of timestamptz,
    heartbeat_age_seconds float8, lease_left_seconds float8, deadline_left_seconds float8
)
