-- Purpose: what happened recently that the on-call engineer should know even though no lease
--   is unhealthy now: results that landed despite a cancel request, calls that failed for good
--   (attempts exhausted, deadline passed), outcomes that became unknown, stale-token writes
--   refused (a zombie worker), ownership that could not be confirmed, operator actions refused
--   or blocked by a row lock. Newest first; reads only the recent end of the history: the window's
--   start is a value computed once (not a join), so it bounds the scan of the partial index on
--   notable events (job_events_notable_idx), and a quiet window costs nothing however long the
--   history is.
-- Zero rows: nothing notable happened in the window.
-- Parameters: minutes, limit
with clock as materialized (
    select leasectl_now() as now
)
select e.id, e.job_id, e.at, e.kind, e.actor, e.fencing_token, e.reason, j.tool,
       case
           when e.kind = 'state_changed' and e.details ? 'completed_despite_cancel'
               then 'completed despite the cancel request'
           when e.kind = 'state_changed' and e.state_to = 'failed'
               then 'failed for good: ' || coalesce(e.details ->> 'terminal_reason', 'error')
           when e.kind = 'state_changed' and e.state_to = 'outcome_unknown'
               then 'outcome unknown: a human must decide'
           when e.kind = 'heartbeat_lost' then 'stale heartbeat refused (zombie)'
           when e.kind = 'result_rejected' then 'stale result refused (zombie)'
           when e.kind = 'receiver_rejected' then 'receiver refused a stale token (zombie)'
           when e.kind = 'ownership_unknown' then 'worker could not confirm its lease: step not sent'
           when e.kind = 'operator_action_failed'
               then 'operator ' || replace(coalesce(e.details ->> 'action', 'action'), '_', ' ') || ' not applied: '
                    || coalesce(e.details ->> 'error', 'error')
           when e.details ->> 'outcome' = 'refused'
               then 'operator ' || replace(substr(e.kind, 10), '_', ' ') || ' refused: '
                    || coalesce(e.details ->> 'refusal', '')
           else 'operator ' || replace(substr(e.kind, 10), '_', ' ') || ' applied'
       end as what
from job_events e
join tool_jobs j on j.id = e.job_id
where e.at > (select now from clock) - :minutes::integer * interval '1 minute'
  and (e.kind in ('heartbeat_lost', 'result_rejected', 'receiver_rejected', 'ownership_unknown',
                  'operator_action_failed', 'operator_cancel', 'operator_mark_terminal',
                  'operator_approve_retry')
       or (e.kind = 'state_changed'
           and (e.state_to in ('failed', 'outcome_unknown') or e.details ? 'completed_despite_cancel')))
order by e.at desc, e.id desc
limit :limit::integer
