-- Purpose: one page of calls, newest first, filtered; keyset pagination on (created_at, id)
--   so a page costs the same on the first page and the thousandth. Payload and result are
--   left out (their hash and size are in): `views/job.sql` has everything of one call.
--   Tool cutoffs and the clock are computed once per query; each row only compares timestamps.
-- Zero rows: no call matches (or no more pages).
--   A finished call holds no lease: its heartbeat age, lease left and lease health are null (a
--   zombie -- a stale write refused in the last five minutes -- still shows as one).
--   With ids, only those calls (a bulk action's marked calls, read again in one snapshot).
--   A running call past its deadline is `past_deadline` (migration 0014: its lease ended with it).
-- Parameters: state, tool, owner, agent, key_prefix, id_low, id_high, health, model, provider,
--   side_effect, chain_low, chain_high (a range of chain ids, as id_low/id_high), parent_low,
--   parent_high, session, trace_prefix, priority, payload_path, payload_vars, payload_text, ids,
--   before_created, before_id, limit (every filter null = no filter; console/core/filters.py
--   JobFilter.sql_values gives them all). payload_path: a jsonpath that must exist in the payload,
--   with payload_vars its variables (jsonb); payload_text: text the payload's JSON text contains,
--   in any case. A payload filter needs SELECT on tool_jobs.payload (meta/payload_access.sql,
--   asked first) and is bounded by the session's statement timeout.
-- Optional: chain_low, chain_high, parent_low, parent_high, session, trace_prefix, priority,
--   payload_path, payload_vars, payload_text
with clock as materialized (
    select leasectl_now() as now
),
cutoffs as materialized (
    select c.* from clock, leasectl_tool_cutoffs(clock.now) c
),
-- the calls the rest of the filter selects, newest first; `payload:` (JobFilter.payload) is tested
-- only on these, outside the fenced subquery (OFFSET 0: its condition cannot be pushed down into the
-- scan, where it could run before the others), as they stream out in order, so the page's LIMIT
-- stops the scan at the page's last match. No ORDER BY at this level: the subquery's order is kept
-- (a scan and a filter do not reorder rows), and an ORDER BY here would make the planner plan the
-- subquery for reading every row (a sort of all of them before the first) instead of for the
-- page's few (tuple_fraction, passed down only without one). The page's rows are sorted again at
-- the end. The path is a jsonpath parameter and the values its variables: never SQL text.
page as (
    select c.*
    from (
        select j.*
        from tool_jobs j
        where (:state::text is null or j.state = :state::text)
          and (:tool::text is null or j.tool = :tool::text)
          and (:owner::text is null or j.owner_id = :owner::text)
          and (:agent::text is null or j.agent_id = :agent::text)
          -- a range, not LIKE: the C-collated unique index serves it under any plan
          and (:key_prefix::text is null
               or (j.idempotency_key >= :key_prefix::text
                   and j.idempotency_key < :key_prefix::text || chr(1114111)))
          and (:id_low::uuid is null or j.id between :id_low::uuid and :id_high::uuid)
          and (:ids::uuid[] is null or j.id = any(:ids::uuid[]))
          and (:model::text is null or j.model = :model::text)
          and (:provider::text is null or j.provider = :provider::text)
          and (:side_effect::text is null or j.tool in (select name from tools where side_effect = :side_effect::text))
          and (:chain_low::uuid is null or j.chain_id between :chain_low::uuid and :chain_high::uuid)
          and (:parent_low::uuid is null or j.parent_id between :parent_low::uuid and :parent_high::uuid)
          and (:session::text is null or j.session_id = :session::text)
          and (:trace_prefix::text is null or starts_with(j.trace_id, :trace_prefix::text))
          and (:priority::smallint is null or j.priority = :priority::smallint)
          and (:before_created::timestamptz is null
               or (j.created_at, j.id) < (:before_created::timestamptz, :before_id::uuid))
        order by j.created_at desc, j.id desc
        offset 0
    ) c
    where (:payload_path::jsonpath is null
           or jsonb_path_exists(c.payload, :payload_path::jsonpath, :payload_vars::jsonb, true))
      and (:payload_text::text is null or strpos(lower(c.payload::text), lower(:payload_text::text)) > 0)
    limit case when :health::text is null then :limit::integer else 100000 end
),
labelled as (
    select p.id, p.tool, t.side_effect, p.state, p.owner_id, p.lease_until, p.fencing_token,
           p.heartbeat_at, p.attempt, t.max_attempts + p.extra_attempts as max_attempts,
           p.idempotency_key, p.payload_hash, pg_column_size(p.payload) as payload_size,
           p.agent_id, p.session_id, p.model, p.provider, p.parent_id, p.chain_id, p.stage, p.priority,
           p.accepted_at, p.trace_id, p.created_at, p.claimed_at,
           p.finished_at, p.deadline_at, p.cancel_requested_at, p.cancel_requested_by,
           p.cancel_requested_reason, p.side_effect_started_at, p.external_request_id,
           p.retry_approved_by, p.retry_approved_at, p.retry_approved_reason, p.terminal_reason,
           p.completed_despite_cancel,
           t.lease_seconds, t.heartbeat_seconds, t.jitter_seconds, t.stage_timeout_seconds,
           nullif(leasectl_job_health(p.state, p.lease_until, p.heartbeat_at, p.cancel_requested_at,
                                      p.claimed_at, k.late_before, k.unheard_before, k.stage_before,
                                      r.recent, clock.now, p.deadline_at, p.hold_until),
                  case when p.state in ('succeeded', 'failed', 'cancelled') then 'healthy' end) as health,
           clock.now as clock_now
    from page p
    join tools t on t.name = p.tool
    join cutoffs k on k.tool = p.tool
    cross join clock
    cross join lateral (select leasectl_recently_rejected(p.id, clock.now) as recent) r
)
select l.*,
       l.clock_now as db_now,
       case when l.state in ('running', 'cancel_requested')
            then extract(epoch from l.clock_now - l.heartbeat_at)::float8 end as heartbeat_age_seconds,
       case when l.state in ('running', 'cancel_requested')
            then extract(epoch from l.lease_until - l.clock_now)::float8 end as lease_left_seconds,
       extract(epoch from l.deadline_at - l.clock_now)::float8 as deadline_left_seconds
from labelled l
where :health::text is null or l.health is not distinct from :health::text
order by l.created_at desc, l.id desc
limit :limit::integer
