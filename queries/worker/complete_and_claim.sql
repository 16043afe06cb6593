-- Purpose: the reference worker's fast path: commit the result of the call it holds AND claim
--   the next call, in one transaction and one round trip (one commit instead of two). The
--   completion is exactly complete.sql's guarded write; the claim is exactly claim.sql but for
--   two marked places (a test keeps the texts identical otherwise): under the caps of migration
--   0016, the call being completed is not counted, and its slot passes to the next call (the
--   completion runs before the slots are taken). Either both happen or neither does.
-- Zero rows: never. One row: completed (false = the result was rejected, as complete.sql's
--   zero rows), then the next call's claim columns (all null when there was nothing to claim).
-- Parameters: job_id, worker_id, fencing_token, result, tools
-- Order: the claim runs before the completion's write (the join order below). Every claimer scans
--   the head of the queue under this statement's snapshot; a row another worker claimed after
--   that snapshot is still "queued" in it, so FOR UPDATE follows it to its new version, locks
--   it, finds it running and skips it -- but keeps the lock until this commit, and that worker's
--   completion of its call then waits for our WAL flush. Claiming first keeps the snapshot as
--   young as possible when the queue is scanned (the completion and its triggers used to run in
--   between): at 4 worker processes on 2 cores such waits went from ~18 % of the time backends
--   spent in this statement to ~5 %, and throughput rose ~15 %. Both writes commit together.
with completed as (
    update tool_jobs
    set state       = 'succeeded',
        result      = :result::jsonb,
        lease_until = null
    where id = :job_id::uuid
      and state in ('running', 'cancel_requested')
      and owner_id = :worker_id::text
      and fencing_token = :fencing_token::bigint
      and lease_until > now()
    returning id, completed_despite_cancel, finished_at
),
expired as (
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
                                         where r.tool = t.name and r.id <> :job_id::uuid
                                           and r.state in ('running', 'cancel_requested'))) as tools,
           array(select a.id from agents a
                 where a.max_running is not null
                   and a.max_running <= (select count(*) from tool_jobs r
                                         where r.agent_id = a.id and r.id <> :job_id::uuid
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
                -- (here only: the completion runs first, so the slot of the call it ends is free)
                when (select count(*) from completed) < 0 then false
                else set_config('leasectl.claim_passes_full_caps', 'on', true) = 'on' end as has_room
    from candidate c
),
claimed as (
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
)
select exists (select 1 from completed) as completed,
       d.completed_despite_cancel, d.finished_at,
       n.*
from (select 1) as one
left join claimed n on true     -- the claim first: see the note below
left join completed d on true
