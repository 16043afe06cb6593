-- Purpose: finish a stage and enqueue the next one of its chain, in one transaction: the next
--   stage exists if and only if this one succeeded (docs/seeds.md §000: what was done between
--   stages is a fact, not a guess from key names). The completion is complete.sql's guarded
--   write; the next stage is enqueue.sql's call with parent_id = this call: same chain, stage + 1,
--   its deadline no later than this one's, the agent, session, model, provider, priority and
--   trace carried over. The same next_idempotency_key twice gives the first call.
-- Zero rows: the result was rejected (the lease was lost) and nothing was enqueued. One row:
--   completed; next_id is null when the next stage was refused (its chain has a cancel request:
--   this stage's result stands, no later stage starts).
-- Parameters: job_id, worker_id, fencing_token, result (jsonb), next_tool, next_idempotency_key,
--   next_payload (jsonb)
with done as (
    update tool_jobs
    set state       = 'succeeded',
        result      = :result::jsonb,
        lease_until = null
    where id = :job_id::uuid
      and state in ('running', 'cancel_requested')
      and owner_id = :worker_id::text
      and fencing_token = :fencing_token::bigint
      and lease_until > now()
    returning id, state, completed_despite_cancel, finished_at, agent_id, session_id, model, provider,
              priority, trace_id
)
select d.id, d.state, d.completed_despite_cancel, d.finished_at,
       n.id as next_id, n.state as next_state, n.created as next_created
from done d
left join lateral leasectl_enqueue(:next_tool::text, :next_idempotency_key::text, :next_payload::jsonb,
                                   d.agent_id, d.session_id, null::timestamptz, d.model, d.provider, d.id,
                                   d.priority, null::timestamptz, d.trace_id) n on true
