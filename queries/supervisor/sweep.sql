-- Purpose: resolve expired leases and missed deadlines, by the side-effect rules:
--   an unverifiable call whose side effect started -> outcome_unknown (a human decides);
--   an expired call with a pending cancel            -> cancelled (nobody runs it any more);
--   deadline passed or attempts used up               -> failed;
--   too little time left to finish (min_time_left)    -> failed, saying so (an honest "didn't make it");
--   a queued call of a chain with a cancel request    -> cancelled (no later stage starts);
--   (a mutating_verifiable call whose request went out unchecked ends in outcome_unknown instead
--   of failed or cancelled: the database turns it, migration 0014)
--   anything else (safe to redo)                      -> queued, for any worker to claim.
--   Rows locked by someone else are skipped and left for the next sweep.
-- Zero rows: nothing had expired.
-- Parameters: none
with actor as (
    select set_config('leasectl.actor', 'sweeper', true) as name
),
-- everything decided below comes from the locked (latest) version of each row
expired as (
    select j.id, j.state as state_from, j.side_effect_started_at, j.deadline_at, j.attempt,
           j.extra_attempts, t.side_effect, t.max_attempts,
           now() + t.min_time_left_seconds * interval '1 second' as start_by,
           leasectl_chain_cancelled(j.chain_id) as chain_cancelled
    from tool_jobs j
    join tools t on t.name = j.tool
    cross join actor
    where (j.state in ('running', 'cancel_requested') and j.lease_until < now())
       or (j.state = 'queued' and j.deadline_at <= now() + t.min_time_left_seconds * interval '1 second')
       or (j.state = 'queued' and j.chain_id in (select c.chain_id from tool_jobs c
                                                 where c.cancel_requested_at is not null))
    for update of j skip locked
),
decided as (
    select e.id, e.state_from,
           case
               when e.state_from = 'queued' and e.chain_cancelled then 'cancelled'
               when e.state_from = 'queued' then 'failed'
               when e.side_effect = 'mutating_unverifiable' and e.side_effect_started_at is not null
                   then 'outcome_unknown'
               when e.state_from = 'cancel_requested' then 'cancelled'
               when e.deadline_at <= now() then 'failed'
               when e.attempt >= e.max_attempts + e.extra_attempts then 'failed'
               when e.deadline_at <= e.start_by then 'failed'
               when e.chain_cancelled then 'cancelled'
               else 'queued'
           end as state_to,
           case
               when e.state_from = 'queued' and e.chain_cancelled then 'its chain has a cancel request: never started'
               when e.state_from = 'queued' and e.deadline_at <= now() then 'deadline passed while queued'
               when e.state_from = 'queued' then 'not enough time left before the deadline to start'
               when e.side_effect = 'mutating_unverifiable' and e.side_effect_started_at is not null
                   then 'lease expired after an unverifiable side effect started'
               when e.state_from = 'cancel_requested' then 'lease expired with a cancel pending'
               when e.deadline_at <= now() then 'lease expired after the deadline'
               when e.attempt >= e.max_attempts + e.extra_attempts
                   then 'lease expired and attempts exhausted'
               when e.deadline_at <= e.start_by
                   then 'lease expired; not enough time left before the deadline for another attempt'
               when e.chain_cancelled then 'lease expired; no retry: its chain has a cancel request'
               else 'lease expired; safe to redo'
           end as reason
    from expired e
)
update tool_jobs j
set state           = d.state_to,
    owner_id        = case when d.state_to = 'queued' then null else j.owner_id end,
    lease_until     = null,
    terminal_reason = case when d.state_to in ('failed', 'cancelled') then d.reason else j.terminal_reason end,
    error           = case when d.state_to in ('failed', 'outcome_unknown')
                           then coalesce(j.error, '{}'::jsonb) || jsonb_build_object('swept', d.reason)
                           else j.error end
from decided d
where j.id = d.id
  and j.state = d.state_from
returning j.id, d.state_from, j.state as state_to, d.reason, j.fencing_token, j.owner_id
