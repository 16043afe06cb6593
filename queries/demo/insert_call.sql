-- Purpose: insert one fixture call with every column given (exact mode only).
-- Zero rows: never.
-- Parameters: id, tool, state, owner_id, lease_until, fencing_token, heartbeat_at, attempt,
--   idempotency_key, payload, result, error, agent_id, session_id, model, provider, created_at,
--   claimed_at, finished_at, deadline_at, cancel_requested_at, cancel_requested_by,
--   cancel_requested_reason, side_effect_started_at, external_request_id, retry_approved_by,
--   retry_approved_at, retry_approved_reason, terminal_reason, completed_despite_cancel,
--   parent_id, chain_id (default: its own id), stage (default 0), accepted_at (default created_at),
--   priority (default 0), trace_id
-- Optional: parent_id, chain_id, stage, accepted_at, priority, trace_id
insert into tool_jobs (id, tool, state, owner_id, lease_until, fencing_token, heartbeat_at, attempt,
                       idempotency_key, payload, payload_hash, result, error, agent_id, session_id, model,
                       provider, created_at, claimed_at, finished_at, deadline_at, cancel_requested_at,
                       cancel_requested_by, cancel_requested_reason, side_effect_started_at,
                       external_request_id, retry_approved_by, retry_approved_at, retry_approved_reason,
                       terminal_reason, completed_despite_cancel, parent_id, chain_id, stage, accepted_at,
                       priority, trace_id)
values (:id::uuid, :tool::text, :state::text, :owner_id::text, :lease_until::timestamptz,
        :fencing_token::bigint, :heartbeat_at::timestamptz, :attempt::integer, :idempotency_key::text,
        :payload::jsonb, encode(sha256(convert_to(:payload::jsonb::text, 'UTF8')), 'hex'), :result::jsonb,
        :error::jsonb, :agent_id::text, :session_id::text, :model::text, :provider::text,
        :created_at::timestamptz, :claimed_at::timestamptz, :finished_at::timestamptz,
        :deadline_at::timestamptz, :cancel_requested_at::timestamptz, :cancel_requested_by::text,
        :cancel_requested_reason::text, :side_effect_started_at::timestamptz, :external_request_id::text,
        :retry_approved_by::text, :retry_approved_at::timestamptz, :retry_approved_reason::text,
        :terminal_reason::text, :completed_despite_cancel::boolean, :parent_id::uuid,
        coalesce(:chain_id::uuid, :id::uuid), coalesce(:stage::integer, 0),
        coalesce(:accepted_at::timestamptz, :created_at::timestamptz), coalesce(:priority::smallint, 0),
        :trace_id::text)
returning id
