-- Purpose: one call with everything known about it but its payload and result (which may be
--   megabytes; views/job_document.sql and views/job_payload_preview.sql read those on demand):
--   every other column, its tool's class and lease sizing, derived ages from the database's
--   (display) clock, and its lease health. A finished call holds no lease: its heartbeat age,
--   lease left and lease health are null (unless a stale write was refused lately: a zombie).
--   A running call past its deadline is `past_deadline` (migration 0014). Its chain (parent,
--   chain, stage), priority, acceptance and trace, and its last recorded check of an earlier
--   request (`check`: {found, checked_at, token}, null when none was recorded).
-- Zero rows: no such call.
-- Parameters: job_id
select j.id, j.state, j.fencing_token, j.lease_until, j.heartbeat_at, j.attempt, j.extra_attempts,
       j.created_at, j.claimed_at, j.finished_at, j.deadline_at, j.cancel_requested_at,
       j.side_effect_started_at, j.retry_approved_at, j.completed_despite_cancel, j.tool, j.owner_id,
       j.agent_id, j.session_id, j.model, j.provider, j.parent_id, j.chain_id, j.stage, j.priority,
       j.accepted_at, j.trace_id, j.cancel_requested_by, j.cancel_requested_reason,
       j.external_request_id, j.retry_approved_by, j.retry_approved_reason, j.terminal_reason,
       j.idempotency_key, j.payload_hash, j.error,
       case when j.checked_at is not null
            then jsonb_build_object('found', j.check_found, 'checked_at', j.checked_at, 'token', j.check_token)
       end as "check",
       t.side_effect, t.lease_seconds, t.heartbeat_seconds, t.missed_heartbeats, t.jitter_seconds,
       t.stage_timeout_seconds,
       t.max_attempts + j.extra_attempts as max_attempts,
       pg_column_size(j.payload) as payload_size,
       leasectl_now() as db_now,
       case when j.state in ('running', 'cancel_requested')
            then extract(epoch from leasectl_now() - j.heartbeat_at)::float8 end as heartbeat_age_seconds,
       case when j.state in ('running', 'cancel_requested')
            then extract(epoch from j.lease_until - leasectl_now())::float8 end as lease_left_seconds,
       extract(epoch from j.deadline_at - leasectl_now())::float8 as deadline_left_seconds,
       nullif(leasectl_job_health(j.state, j.lease_until, j.heartbeat_at, j.cancel_requested_at,
                                  j.claimed_at, k.late_before, k.unheard_before, k.stage_before,
                                  r.recent, leasectl_now(), j.deadline_at, j.hold_until),
              case when j.state in ('succeeded', 'failed', 'cancelled') then 'healthy' end) as health
from tool_jobs j
join tools t on t.name = j.tool
join leasectl_tool_cutoffs(leasectl_now()) k on k.tool = j.tool
cross join lateral (select leasectl_recently_rejected(j.id, leasectl_now()) as recent) r
where j.id = :job_id::uuid
