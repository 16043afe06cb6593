-- Purpose: resolve expired leases and missed deadlines, by the side-effect rules:
--   an unverifiable call whose side effect started -> outcome_unknown (a human decides);
--   an expired call with a pending cancel            -> cancelled (nobody runs it any more);
--   deadline passed or attempts used up               -> failed;
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
           j.extra_attempts, t.side_effect, t.max_attempts
    from tool_jobs j
    join tools t on t.name = j.tool
    cross join actor
    where (j.state in ('running', 'cancel_requested') and j.lease_until < now())
       or (j.state = 'queued' and j.deadline_at <= now())
    for update of j skip locked
),
decided as (
    select e.id, e.state_from,
           case
               when e.state_from = 'queued' then 'failed'
               when e.side_effect = 'mutating_unverifiable' and e.side_effect_started_at is not null
                   then 'outcome_unknown'
               when e.state_from = 'cancel_requested' then 'cancelled'
               when e.deadline_at <= now() then 'failed'
               when e.attempt >= e.max_attempts + e.extra_attempts then 'failed'
               else 'queued'
           end as state_to,
           case
               when e.state_from = 'queued' then 'deadline passed while queued'
               when e.side_effect = 'mutating_unverifiable' and e.side_effect_started_at is not null
                   then 'lease expired after an unverifiable side effect started'
               when e.state_from = 'cancel_requested' then 'lease expired with a cancel pending'
               when e.deadline_at <= now() then 'lease expired after the deadline'
               when e.attempt >= e.max_attempts + e.extra_attempts
                   then 'lease expired and attempts exhausted'
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
