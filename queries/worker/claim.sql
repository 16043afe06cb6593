-- Purpose: atomically take one call: an expired lease that is safe to redo first, else the
--   queued call of the highest priority, oldest first. Grants a lease of tools.lease_seconds
--   (no later than the call's hold, tools.max_hold_seconds, which the database sets) and a new
--   fencing token. Never starts a call of a paused tool, nor one past its tool's or its agent's
--   max_running (migrations 0016, 0027: the call chosen takes a free slot of each cap as it
--   starts, passing by one another claimer is taking; when another claimer took the last one
--   since this statement's snapshot, nothing is claimed this time).
--   A reclaimed call keeps side_effect_started_at and external_request_id: the new owner is
--   told that a request may already have run and must check before acting (verifiable tools).
--   Never reclaims an unverifiable call whose side effect started: that one waits for a human.
--   Never hands out a call of an agent that is not running: its subtree is shutting down.
--   Never starts a call with less time left before its deadline than its tool's
--   min_time_left_seconds, nor a call of a chain with a cancel request; the lease it grants
--   ends at the deadline at the latest (the database refuses a later one).
-- Zero rows: nothing to do for these tools right now (or only calls under a cap, or paused).
-- Parameters: worker_id, tools (text[] or null for any tool)
with expired as (
    select j.id, j.tool, j.agent_id, j.attempt, t.max_running
    from tool_jobs j
    join tools t on t.name = j.tool
    where j.state = 'running'
      -- skipped while no lease can have run out yet (the lease watch, migration 0020)
      and not exists (select 1 from leasectl_lease_watch w where w.next_expiry > now())
      and j.lease_until < now()
      and (:tools::text[] is null or j.tool = any(:tools::text[]))
      and not (t.side_effect = 'mutating_unverifiable' and j.side_effect_started_at is not null)
      -- an attempt left, and the tool not paused (0016): one comparison, see the queue's below
      and j.attempt < case when t.paused_at is null then t.max_attempts + j.extra_attempts else 0 end
      and (j.deadline_at is null or j.deadline_at > now() + t.min_time_left_seconds * interval '1 second')
      and not exists (select 1 from tool_jobs c where c.chain_id = j.chain_id and c.cancel_requested_at is not null)
      and not exists (select 1 from agents a where a.id = j.agent_id and a.state <> 'running')
    order by j.lease_until
    limit 1
    for update of j skip locked
),
-- the tools and the agents whose cap (max_running, 0016) is full by this statement's snapshot,
-- each counted once per statement, not once for each queued call looked at (the count in the
-- queue's filter made the planner price every call it would look at so high that, for a batch,
-- it sorted the whole queue instead of walking tool_jobs_queued_idx); the slot itself is taken
-- below, for the calls chosen
full_caps as materialized (
    select array(select t.name from tools t
                 where t.max_running is not null
                   and t.max_running <= (select count(*) from tool_jobs r
                                         where r.tool = t.name
                                           and r.state in ('running', 'cancel_requested'))) as tools,
           array(select a.id from agents a
                 where a.max_running is not null
                   and a.max_running <= (select count(*) from tool_jobs r
                                         where r.agent_id = a.id
                                           and r.state in ('running', 'cancel_requested'))) as agents
),
fresh as (
    select j.id, j.tool, j.agent_id, j.attempt, t.max_running
    from tool_jobs j
    join tools t on t.name = j.tool
    cross join full_caps f
    where j.state = 'queued'
      and not exists (select 1 from expired)
      and (:tools::text[] is null or j.tool = any(:tools::text[]))
      -- an attempt left, and the tool not paused (0016): one comparison, as in expired above. A
      -- test of its own on tools' columns (paused_at is null) is estimated at 0.5 % of the rows
      -- when tools has no statistics (a small table autovacuum seldom analyzes), and the planner
      -- then sorts the whole queue instead of walking tool_jobs_queued_idx: claims measured 5
      -- times slower. Not under a full cap (full_caps).
      and j.attempt < case when t.paused_at is null then t.max_attempts + j.extra_attempts else 0 end
      and j.tool <> all (f.tools)
      and (j.agent_id is null or j.agent_id <> all (f.agents))
      and (j.deadline_at is null or j.deadline_at > now() + t.min_time_left_seconds * interval '1 second')
      and not exists (select 1 from tool_jobs c where c.chain_id = j.chain_id and c.cancel_requested_at is not null)
      and not exists (select 1 from agents a where a.id = j.agent_id and a.state <> 'running')
    order by j.priority desc, j.created_at
    limit 1
    for update of j skip locked
),
candidate as (
    select * from expired
    union all
    select * from fresh
),
-- A capped call takes a slot of each cap as the guard lets it start (migration 0027); when another
-- claimer took the last free one since this statement's snapshot, the call is passed over and
-- nothing is claimed this time: this transaction asks to be told so by no row, not by an error
-- (leasectl.claim_passes_full_caps; it cannot start a call past a cap). In the select list, so
-- that it runs for the chosen call only, before the call is written.
slotted as materialized (
    select c.id,
           case when c.max_running is null
                     and not exists (select 1 from agents a where a.id = c.agent_id and a.max_running is not null)
                then true
                else set_config('leasectl.claim_passes_full_caps', 'on', true) = 'on' end as has_room
    from candidate c
)
update tool_jobs j
set state         = 'running',
    owner_id      = :worker_id::text,
    lease_until   = least(now() + t.lease_seconds * interval '1 second', j.deadline_at),
    heartbeat_at  = now(),
    fencing_token = j.fencing_token + 1,
    attempt       = j.attempt + 1,
    claimed_at    = now()
from slotted c, tools t
where j.id = c.id
  and c.has_room
  and t.name = j.tool
returning j.id, j.payload, j.fencing_token, j.lease_until, j.attempt, j.tool,
          j.side_effect_started_at, j.external_request_id, j.idempotency_key, j.deadline_at,
          j.agent_id, j.chain_id, j.stage, j.trace_id, t.side_effect, t.heartbeat_seconds, t.lease_seconds,
          t.jitter_seconds, now() as db_now
