-- Purpose: `leasectl jobs --at TIME` (and the at: of the calls screens): every call as it was at
--   that instant, rebuilt from job_events alone -- state, owner, token, attempt, lease, cancel,
--   side effect, approval, how it finished, lease health -- newest first, keyset pages on
--   (created_at, id) like views/jobs.sql and with its columns, plus as_of. The current row is read
--   only for what never changes (id, tool, key, agent, session, model, provider, created_at,
--   deadline_at: LCS05 and no statement writes them); a call created after the instant is absent.
--   Events count in id order from their own `at` (console.shared.audit's replay, the same rule).
--   The state at T is the last ownership/state event at or before T; the lease is
--   known from the first such event after T (its previous_lease_until: the lease as renewed
--   until then, so it was live at T exactly when that is after T); with no later event, the lease
--   the grant gave if it is still ahead of T, else unknown (renewals are not journaled).
--   Heartbeats are not journaled: heartbeat_at and its age are null, and `heartbeat late` is never
--   said of the past. Lease sizing and stage timeouts are the tools' current ones. db_now is the
--   instant itself, so every age is measured there.
--   Filters: tool, agent, key_prefix, id, model, provider, side_effect select calls by what never
--   changes; state, owner and health apply to the rebuilt call (as it was at T).
-- Zero rows: no call existed at that instant, or none matches.
-- Parameters: at, tool, agent, key_prefix, id_low, id_high, model, provider, side_effect, state, owner,
--   health, before_created, before_id, limit
with clock as materialized (
    select :at::timestamptz as t
),
cutoffs as materialized (
    select c.* from clock, leasectl_tool_cutoffs(clock.t) c
),
page as materialized (
    select j.id, j.tool, j.idempotency_key, j.payload_hash, pg_column_size(j.payload) as payload_size,
           j.agent_id, j.session_id, j.model, j.provider, j.created_at, j.deadline_at
    from tool_jobs j
    where j.created_at <= :at::timestamptz  -- the instant itself, not the CTE: an index condition
      and (:tool::text is null or j.tool = :tool::text)
      and (:agent::text is null or j.agent_id = :agent::text)
      and (:key_prefix::text is null
           or (j.idempotency_key >= :key_prefix::text
               and j.idempotency_key < :key_prefix::text || chr(1114111)))
      and (:id_low::uuid is null or j.id between :id_low::uuid and :id_high::uuid)
      and (:model::text is null or j.model = :model::text)
      and (:provider::text is null or j.provider = :provider::text)
      and (:side_effect::text is null or j.tool in (select name from tools where side_effect = :side_effect::text))
      and (:before_created::timestamptz is null
           or (j.created_at, j.id) < (:before_created::timestamptz, :before_id::uuid))
    order by j.created_at desc, j.id desc
    limit case when :state::text is null and :owner::text is null and :health::text is null
               then :limit::integer else 100000 end
),
-- the events of the page's calls. For a page (the screens ask for 200), an index scan per call.
-- For more than 10,000 calls (every call, or a filter on what is rebuilt, which reads up to
-- 100,000), one scan of the whole history instead: it can run in parallel, and it costs less
-- than that many index scans (tests/bench/audit.py measures both); events of calls not on the
-- page fall out at the join in `rebuilt`. With the parameters' values planned in
-- (plan_cache_mode = force_custom_plan) the branch not taken is never executed; the gates are
-- `is true` / `is not true`, so that a null limit takes exactly one of them.
events as (
    select e.job_id, e.id, e.kind, e.at, e.lease_until, e.state_from, e.state_to, e.details
    from page p
    join job_events e on e.job_id = p.id
    where (:limit::integer <= 10000 and :state::text is null and :owner::text is null
           and :health::text is null) is true
    union all
    select e.job_id, e.id, e.kind, e.at, e.lease_until, e.state_from, e.state_to, e.details
    from job_events e
    where (:limit::integer <= 10000 and :state::text is null and :owner::text is null
           and :health::text is null) is not true
),
-- per call, the ids of the events that matter at T; their values are read after. The instant is
-- the parameter itself, not the clock CTE: a constant keeps the aggregate parallel-safe and cheap.
marks as (
    select e.job_id,
           max(e.id) filter (where e.kind in ('claimed', 'reclaimed', 'state_changed', 'fenced')
                                   and e.at <= :at::timestamptz) as change_id,
           min(e.id) filter (where e.kind in ('claimed', 'reclaimed', 'state_changed', 'fenced')
                                   and e.at > :at::timestamptz) as next_id,
           max(e.at) filter (where e.kind in ('claimed', 'reclaimed') and e.at <= :at::timestamptz) as claimed_at,
           max(e.lease_until) filter (where e.kind in ('claimed', 'reclaimed') and e.at <= :at::timestamptz)
               as granted_until,
           max(e.id) filter (where e.kind = 'state_changed' and e.at <= :at::timestamptz
                                   and (e.state_to = 'cancel_requested'
                                        or (e.state_from = 'queued' and e.state_to = 'cancelled'))) as cancel_id,
           max(e.id) filter (where e.kind = 'operator_cancel' and e.at <= :at::timestamptz
                                   and e.details ->> 'outcome' = 'applied') as operator_cancel_id,
           max(e.id) filter (where e.kind = 'operator_approve_retry' and e.at <= :at::timestamptz
                                   and e.details ->> 'outcome' = 'applied') as approval_id,
           max(e.id) filter (where e.kind in ('tool_request_started', 'side_effect_started')
                                   and e.state_to is not null and e.at <= :at::timestamptz) as request_id,
           max((e.details ->> 'attempt')::integer)
               filter (where e.state_from = 'outcome_unknown' and e.state_to = 'queued'
                             and e.at <= :at::timestamptz)
               as approved_attempt,
           coalesce(bool_or(e.kind in ('heartbeat_lost', 'result_rejected', 'receiver_rejected')
                            and e.at > :at::timestamptz - interval '5 minutes'
                            and e.at <= :at::timestamptz), false)
               as recent
    from events e
    group by e.job_id
),
-- the values of those events: the last change joined as the planner likes (a probe per call for a
-- page, a merge over the primary key for every call); the rare ones by a primary-key probe each
-- (limit 1 keeps each a probe, never a join over the whole history): most calls have no next
-- change, cancel, approval or request to look up. The external request id is the one the row held:
-- start_side_effect.sql sets it (the trigger journals it on the stage's request event, whose
-- state_to is set) and nothing clears it; a request a worker only reported (record_event.sql,
-- state_to null) never reached the row, so it is not the call's external request id then either
rebuilt as (
    select p.id, p.tool, t.side_effect, coalesce(c.state_to, 'queued') as state, c.owner_to as owner_id,
           coalesce(c.fencing_token, 0) as fencing_token,
           coalesce((c.details ->> 'attempt')::integer, 0) as attempt,
           t.max_attempts + greatest(0, coalesce(m.approved_attempt + 1 - t.max_attempts, 0)) as max_attempts,
           p.idempotency_key, p.payload_hash, p.payload_size, p.agent_id, p.session_id, p.model, p.provider,
           p.created_at, m.claimed_at,
           case when c.state_to in ('running', 'cancel_requested') then
                case when m.next_id is not null then n.previous_lease::timestamptz
                     when m.granted_until > k.t then m.granted_until end
           end as lease_until,
           case when c.state_to in ('succeeded', 'failed', 'cancelled') then c.at end as finished_at,
           p.deadline_at,
           x.at as cancel_requested_at, x.actor as cancel_requested_by, oc.reason as cancel_requested_reason,
           case when m.request_id > coalesce(m.approval_id, 0) then r.at end as side_effect_started_at,
           r.external_request_id,
           a.actor as retry_approved_by, a.at as retry_approved_at, a.reason as retry_approved_reason,
           case when c.state_to in ('succeeded', 'failed', 'cancelled') then c.details ->> 'terminal_reason' end
               as terminal_reason,
           coalesce((c.details ->> 'completed_despite_cancel')::boolean, false) as completed_despite_cancel,
           t.lease_seconds, t.heartbeat_seconds, t.jitter_seconds, t.stage_timeout_seconds,
           m.recent, u.late_before, u.unheard_before, u.stage_before, k.t
    from page p
    cross join clock k
    join tools t on t.name = p.tool
    join cutoffs u on u.tool = p.tool
    left join marks m on m.job_id = p.id
    left join job_events c on c.id = m.change_id
    left join lateral (select n.details ->> 'previous_lease_until' as previous_lease
                       from job_events n where n.id = m.next_id limit 1) n on true
    left join lateral (select x.actor, x.at from job_events x where x.id = m.cancel_id limit 1) x on true
    left join lateral (select oc.reason from job_events oc where oc.id = m.operator_cancel_id limit 1) oc on true
    left join lateral (select a.actor, a.at, a.reason from job_events a where a.id = m.approval_id limit 1) a on true
    left join lateral (select r.at, r.details ->> 'external_request_id' as external_request_id
                       from job_events r where r.id = m.request_id limit 1) r on true
),
labelled as (
    select b.*,
           -- a finished call has no lease health: the function (plpgsql, ~15 us a row) is not asked
           case when b.state not in ('succeeded', 'failed', 'cancelled') then
                leasectl_job_health(b.state, b.lease_until, null, b.cancel_requested_at, b.claimed_at,
                                    b.late_before, b.unheard_before, b.stage_before,
                                    coalesce(b.recent, false), b.t)
           end as health
    from rebuilt b
)
select l.id, l.tool, l.side_effect, l.state, l.owner_id, l.lease_until, l.fencing_token,
       null::timestamptz as heartbeat_at, l.attempt, l.max_attempts, l.idempotency_key, l.payload_hash,
       l.payload_size, l.agent_id, l.session_id, l.model, l.provider, l.created_at, l.claimed_at,
       l.finished_at, l.deadline_at, l.cancel_requested_at, l.cancel_requested_by, l.cancel_requested_reason,
       l.side_effect_started_at, l.external_request_id, l.retry_approved_by, l.retry_approved_at,
       l.retry_approved_reason, l.terminal_reason, l.completed_despite_cancel, l.lease_seconds,
       l.heartbeat_seconds, l.jitter_seconds, l.stage_timeout_seconds, l.health,
       l.t as db_now, l.t as as_of,
       null::float8 as heartbeat_age_seconds,
       case when l.state in ('running', 'cancel_requested')
            then extract(epoch from l.lease_until - l.t)::float8 end as lease_left_seconds,
       extract(epoch from l.deadline_at - l.t)::float8 as deadline_left_seconds
from labelled l
where (:state::text is null or l.state = :state::text)
  and (:owner::text is null or l.owner_id = :owner::text)
  and (:health::text is null or l.health is not distinct from :health::text)
order by l.created_at desc, l.id desc
limit :limit::integer
