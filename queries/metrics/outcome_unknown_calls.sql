-- Purpose: the calls waiting in outcome_unknown one by one, for the per-call series of
--   `leasectl metrics serve` (leasectl_outcome_unknown_call{id, tool, side_effect}), whose id an
--   alert turns into the command that opens the call. At most :limit of them, the longest waiting
--   first: by when each entered outcome_unknown (its last state_changed event to it; its creation
--   if the history has no such event), then by id. A call entering later sorts after every call
--   already waiting, so a call listed stays listed until it leaves outcome_unknown (its alert does
--   not flap when others arrive). `waiting`: how many wait in all, counted by this same statement,
--   so that the listed calls and leasectl_outcome_unknown_unlisted_calls add up.
--   Cost: one probe of job_events_job_idx per waiting call (bounded below by the call's creation,
--   so older partitions are pruned); calls in outcome_unknown each wait for a human: few.
-- Zero rows: no call waits in outcome_unknown.
-- Parameters: limit (how many calls at most: the exporter's cap on per-call series)
with waiting as (
    select j.id, j.tool, t.side_effect, coalesce(e.at, j.created_at) as entered_at
    from tool_jobs j
    join tools t on t.name = j.tool
    left join lateral (
        select ev.at
        from job_events ev
        where ev.job_id = j.id and ev.kind = 'state_changed' and ev.state_to = 'outcome_unknown'
          and ev.at >= j.created_at
        order by ev.id desc
        limit 1
    ) e on true
    where j.state = 'outcome_unknown'
)
select w.id::text as id, w.tool, w.side_effect, w.entered_at, count(*) over () as waiting
from waiting w
order by w.entered_at, w.id
limit :limit::integer
