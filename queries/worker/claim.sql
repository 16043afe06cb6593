-- Purpose: atomically take one call: an expired lease that is safe to redo first, else the
--   oldest queued call. Grants a lease of tools.lease_seconds and a new fencing token.
--   A reclaimed call keeps side_effect_started_at and external_request_id: the new owner is
--   told that a request may already have run and must check before acting (verifiable tools).
--   Never reclaims an unverifiable call whose side effect started: that one waits for a human.
--   Never hands out a call of an agent that is not running: its subtree is shutting down.
--   Never starts a call with less time left before its deadline than its tool's
--   min_time_left_seconds, nor a call of a chain with a cancel request; the lease it grants
--   ends at the deadline at the latest (the database refuses a later one).
-- Zero rows: nothing to do for these tools right now.
-- Parameters: worker_id, tools (text[] or null for any tool)
with expired as (
    select j.id
    from tool_jobs j
    join tools t on t.name = j.tool
    where j.state = 'running'
      and j.lease_until < now()
      and (:tools::text[] is null or j.tool = any(:tools::text[]))
      and not (t.side_effect = 'mutating_unverifiable' and j.side_effect_started_at is not null)
      and j.attempt < t.max_attempts + j.extra_attempts
      and (j.deadline_at is null or j.deadline_at > now() + t.min_time_left_seconds * interval '1 second')
      and not exists (select 1 from tool_jobs c where c.chain_id = j.chain_id and c.cancel_requested_at is not null)
      and not exists (select 1 from agents a where a.id = j.agent_id and a.state <> 'running')
    order by j.lease_until
    limit 1
    for update of j skip locked
),
fresh as (
    select j.id
    from tool_jobs j
    join tools t on t.name = j.tool
    where j.state = 'queued'
      and not exists (select 1 from expired)
      and (:tools::text[] is null or j.tool = any(:tools::text[]))
      and j.attempt < t.max_attempts + j.extra_attempts
      and (j.deadline_at is null or j.deadline_at > now() + t.min_time_left_seconds * interval '1 second')
      and not exists (select 1 from tool_jobs c where c.chain_id = j.chain_id and c.cancel_requested_at is not null)
      and not exists (select 1 from agents a where a.id = j.agent_id and a.state <> 'running')
    order by j.created_at
    limit 1
    for update of j skip locked
),
candidate as (
    select id from expired
    union all
    select id from fresh
)
update tool_jobs j
set state         = 'running',
    owner_id      = :worker_id::text,
    lease_until   = least(now() + t.lease_seconds * interval '1 second', j.deadline_at),
    heartbeat_at  = now(),
    fencing_token = j.fencing_token + 1,
    attempt       = j.attempt + 1,
    claimed_at    = now()
from candidate c, tools t
where j.id = c.id
  and t.name = j.tool
returning j.id, j.payload, j.fencing_token, j.lease_until, j.attempt, j.tool,
          j.side_effect_started_at, j.external_request_id, j.idempotency_key, j.deadline_at,
          j.agent_id, j.chain_id, j.stage, t.side_effect, t.heartbeat_seconds, t.lease_seconds, t.jitter_seconds,
          now() as db_now
