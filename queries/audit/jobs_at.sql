-- Purpose: `leasectl jobs --at TIME` (and the at: of the calls screens): every call as it was at
--   that instant, rebuilt from job_events alone -- state, owner, token, attempt, lease, cancel,
--   side effect, approval, how it finished, lease health -- newest first, keyset pages on
--   (created_at, id) like views/jobs.sql and with its columns, plus as_of. The current row is read
--   only for what never changes (id, tool, key, agent, session, model, provider, created_at,
--   deadline_at: LCS05 and no statement writes them; parent, chain, stage, acceptance and trace:
--   migration 0014 refuses a change, and no statement writes priority after the enqueue); a call
--   created after the instant is absent.
--   Events count in id order from their own `at` (console.shared.audit's replay, the same rule).
--   The state at T is the last ownership/state event at or before T; the lease is
--   known from the first such event after T (its previous_lease_until: the lease as renewed
--   until then, so it was live at T exactly when that is after T); with no later event, the lease
--   the grant gave if it is still ahead of T, else unknown (renewals are not journaled).
--   Heartbeats are not journaled: heartbeat_at and its age are null, and `heartbeat late` is never
--   said of the past. Lease sizing and stage timeouts are the tools' current ones. db_now is the
--   instant itself, so every age is measured there; a call running at T past its deadline was
--   `past_deadline` then (migration 0014).
--   Filters: tool, agent, key_prefix, id, model, provider, side_effect, chain, parent, session,
--   trace_prefix, priority and payload select calls by what never changes; state, owner and health apply to the
--   rebuilt call (as it was at T). created_from (null: every call): only the calls created at or
--   after it -- once history was archived, the calls created before the online history begins are
--   left out (their events are archived; console/core/history.py says when that is allowed).
-- Zero rows: no call existed at that instant, or none matches.
-- Parameters: at, tool, agent, key_prefix, id_low, id_high, model, provider, side_effect, chain_low,
--   chain_high, parent_low, parent_high, session, trace_prefix, priority, payload_path, payload_vars,
--   payload_text, state, owner, health, before_created, before_id, limit, created_from (payload_*: as
--   views/jobs.sql takes them)
-- Optional: chain_low, chain_high, parent_low, parent_high, session, trace_prefix, priority, created_from,
--   payload_path, payload_vars, payload_text
with clock as materialized (
    select :at::timestamptz as t, leasectl_json_time(:at::timestamptz) as t_json
),
-- per tool, once: its class, its attempts, the cutoffs of leasectl_job_health, and its lease
-- sizing already written as the four JSON members they are in every line of its calls
tool_facts as materialized (
    select t.name, to_json(t.name)::text as tool_json, t.side_effect, t.max_attempts, u.late_before, u.unheard_before, u.stage_before,
           format(E'"lease_seconds": %s,\n    "heartbeat_seconds": %s,\n    "jitter_seconds": %s,\n'
                  '    "stage_timeout_seconds": %s',
                  leasectl_json_float(t.lease_seconds::float8), leasectl_json_float(t.heartbeat_seconds::float8),
                  leasectl_json_float(t.jitter_seconds::float8),
                  leasectl_json_float(t.stage_timeout_seconds::float8)) as sizing_json
    from clock, leasectl_tool_cutoffs(clock.t) u
    join tools t on t.name = u.tool
),
-- the calls the rest of the filter selects, newest first; `payload:` is tested only on these, outside
-- the fenced subquery, as they stream out in order (views/jobs.sql says why: the same shape). A
-- call's payload never changes (LCS05): the payload of now is the payload at T.
page as materialized (
    select c.id, c.tool, c.idempotency_key, c.payload_hash, c.payload_size, c.agent_id, c.session_id,
           c.model, c.provider, c.created_at, c.deadline_at, c.parent_id, c.chain_id, c.stage, c.priority,
           c.accepted_at, c.trace_id
    from (
        select j.id, j.tool, j.idempotency_key, j.payload_hash, pg_column_size(j.payload) as payload_size,
               j.agent_id, j.session_id, j.model, j.provider, j.created_at, j.deadline_at,
               j.parent_id, j.chain_id, j.stage, j.priority, j.accepted_at, j.trace_id, j.payload
        from tool_jobs j
        where j.created_at <= :at::timestamptz  -- the instant itself, not the CTE: an index condition
          and (:created_from::timestamptz is null or j.created_at >= :created_from::timestamptz)
          and (:tool::text is null or j.tool = :tool::text)
          and (:agent::text is null or j.agent_id = :agent::text)
          and (:key_prefix::text is null
               or (j.idempotency_key >= :key_prefix::text
                   and j.idempotency_key < :key_prefix::text || chr(1114111)))
          and (:id_low::uuid is null or j.id between :id_low::uuid and :id_high::uuid)
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
    -- a filter on what is rebuilt (state, owner, health as they were) needs every call rebuilt
    -- first: no limit here then (the statement timeout bounds it, never a silent cut)
    limit case when :state::text is null and :owner::text is null and :health::text is null
               then :limit::integer end
),
-- the events of the page's calls. For a page (the screens ask for 200), an index scan per call.
-- For more than 10,000 calls (every call, or a filter on what is rebuilt), one scan of the whole
-- history instead: it can run in parallel, and it costs less
-- than that many index scans (tests/bench/audit.py measures both); events of calls not on the
-- page fall out at the join in `rebuilt`. With the parameters' values planned in
-- (plan_cache_mode = force_custom_plan) the branch not taken is never executed; the gates are
-- `is true` / `is not true`, so that a null limit takes exactly one of them. Each branch lists its
-- columns and classifies its events itself (leasectl_rebuild_class, migrations/0019_audit_rules.sql,
-- inlined), on purpose: classified once outside the
-- union (a plain subquery) the CASE is copied into every FILTER below and runs ten times a row, and
-- behind an OFFSET 0 fence the scan is no longer parallel (1.15x the time for every call, both
-- measured).
events as (
    select e.job_id, e.id, e.kind, e.at, e.lease_until, e.state_from, e.state_to, e.owner_to, e.fencing_token,
           e.actor, e.reason, e.details,
           -- what kind of event it is for the rebuild, decided once
           leasectl_rebuild_class(e.kind) as class,
           e.at <= :at::timestamptz as by_then
    from page p
    join job_events e on e.job_id = p.id
    where (:limit::integer <= 10000 and :state::text is null and :owner::text is null
           and :health::text is null) is true
    union all
    select e.job_id, e.id, e.kind, e.at, e.lease_until, e.state_from, e.state_to, e.owner_to, e.fencing_token,
           e.actor, e.reason, e.details,
           -- what kind of event it is for the rebuild, decided once
           leasectl_rebuild_class(e.kind) as class,
           e.at <= :at::timestamptz as by_then
    from job_events e
    where (:limit::integer <= 10000 and :state::text is null and :owner::text is null
           and :health::text is null) is not true
),
-- per call, what the events that matter at T say, read in the one pass over them (no probe back
-- into job_events per call: 100,000 probes by primary key cost more than the aggregate itself).
-- Each of those events is the max (or min) of an array whose first element is its id as 19
-- digits (id + 1e18: ids are positive, and an identity column reaches 8.2e18, where this would
-- fail loudly, only after 8.2e18 events), so that the arrays compare as the ids do (collate "C":
-- byte order, whatever the database's collation); the rest are its values as text, or already as
-- the JSON the line needs. `at::text` is read back by the same session in the same statement
-- (leasectl's sessions use DateStyle ISO): the round trip is exact. How a call finished is read
-- from its last terminal change (one per call: the details are read for those only). The instant
-- is the parameter itself, not the clock CTE: a constant keeps the aggregate parallel-safe and
-- cheap.
marks as (
    select e.job_id,
           max(array[(e.id + 1000000000000000000)::text, e.state_to, e.owner_to, e.fencing_token::text,
                     e.details ->> 'attempt'] collate "C")
               filter (where e.class between 1 and 3 and e.by_then) as change,
           -- the last terminal change, its time and reason already as JSON (one per call)
           max(array[(e.id + 1000000000000000000)::text, leasectl_json_time(e.at),
                     leasectl_json_text(e.details ->> 'terminal_reason'),
                     e.details ->> 'completed_despite_cancel'] collate "C")
               filter (where e.class between 1 and 3 and e.by_then and e.state_to in ('succeeded', 'failed', 'cancelled'))
               as finish,
           -- the lease as renewed until the first change after T: live at T exactly when after T
           min(array[(e.id + 1000000000000000000)::text, e.details ->> 'previous_lease_until'] collate "C")
               filter (where e.class between 1 and 3 and not e.by_then) as next_change,
           max(e.at) filter (where e.class = 1 and e.by_then) as claimed_at,
           max(e.lease_until) filter (where e.class = 1 and e.by_then) as granted_until,
           max(array[(e.id + 1000000000000000000)::text, e.actor, e.at::text] collate "C")
               filter (where e.class = 2 and e.by_then
                             and (e.state_to = 'cancel_requested'
                                  or (e.state_from = 'queued' and e.state_to = 'cancelled'))) as cancel,
           max(array[(e.id + 1000000000000000000)::text, e.reason] collate "C")
               filter (where e.class = 5 and e.by_then and e.details ->> 'outcome' = 'applied')
               as operator_cancel,
           max(array[(e.id + 1000000000000000000)::text, e.actor, e.at::text, e.reason] collate "C")
               filter (where e.class = 6 and e.by_then
                             and e.details ->> 'outcome' = 'applied') as approval,
           -- the external request id is the one the row held: start_side_effect.sql sets it (the
           -- trigger journals it on the stage's request event, whose state_to is set) and nothing
           -- clears it; a request a worker only reported (record_event.sql, state_to null) never
           -- reached the row, so it is not the call's external request id then either
           max(array[(e.id + 1000000000000000000)::text, leasectl_json_time(e.at),
                     leasectl_json_text(e.details ->> 'external_request_id')] collate "C")
               filter (where e.class = 4 and e.state_to is not null and e.by_then) as request,
           max((e.details ->> 'attempt')::integer)
               filter (where e.class = 2 and e.by_then and e.state_from = 'outcome_unknown' and e.state_to = 'queued')
               as approved_attempt,
           coalesce(bool_or(true) filter (where e.class = 7 and e.by_then
                                           and e.at > :at::timestamptz - interval '5 minutes'), false)
               as recent
    from events e
    group by e.job_id
),
rebuilt as (
    select p.id, p.tool, t.side_effect, coalesce(m.change[2], 'queued') as state, m.change[3] as owner_id,
           coalesce(m.change[4]::bigint, 0) as fencing_token,
           coalesce(m.change[5]::integer, 0) as attempt,
           t.max_attempts + greatest(0, coalesce(m.approved_attempt + 1 - t.max_attempts, 0)) as max_attempts,
           p.idempotency_key, p.payload_hash, p.payload_size, p.agent_id, p.session_id, p.model, p.provider,
           p.parent_id, p.chain_id, p.stage, p.priority, p.accepted_at, p.trace_id,
           p.created_at, m.claimed_at,
           case when m.change[2] in ('running', 'cancel_requested') then
                case when m.next_change is not null then m.next_change[2]::timestamptz
                     when m.granted_until > k.t then m.granted_until end
           end as lease_until,
           case when m.finish[1] = m.change[1] then m.finish[2] else 'null' end as finished_json,
           p.deadline_at,
           m.cancel[3]::timestamptz as cancel_requested_at, m.cancel[2] as cancel_requested_by,
           m.operator_cancel[2] as cancel_requested_reason,
           case when m.request[1] > coalesce(m.approval[1], '') collate "C" then m.request[2] else 'null' end
               as side_effect_started_json,
           coalesce(m.request[3], 'null') as external_request_json,
           m.approval[2] as retry_approved_by, m.approval[3]::timestamptz as retry_approved_at,
           m.approval[4] as retry_approved_reason,
           case when m.finish[1] = m.change[1] then m.finish[3] else 'null' end as terminal_reason_json,
           case when m.finish[1] = m.change[1] and m.finish[4]::boolean then 'true' else 'false' end
               as completed_despite_cancel_json,
           t.tool_json, t.sizing_json, m.recent, t.late_before, t.unheard_before, t.stage_before, k.t, k.t_json
    from page p
    cross join clock k
    join tool_facts t on t.name = p.tool
    left join marks m on m.job_id = p.id
),
labelled as (
    select b.*,
           -- a finished call has no lease health: the function is not asked
           case when b.state not in ('succeeded', 'failed', 'cancelled') then
                leasectl_job_health(b.state, b.lease_until, null, b.cancel_requested_at, b.claimed_at,
                                    b.late_before, b.unheard_before, b.stage_before,
                                    coalesce(b.recent, false), b.t, b.deadline_at)
           end as health
    from rebuilt b
),
chosen as (
    select l.*
    from labelled l
    where (:state::text is null or l.state = :state::text)
      and (:owner::text is null or l.owner_id = :owner::text)
      and (:health::text is null or l.health is not distinct from :health::text)
    order by l.created_at desc, l.id desc
    limit :limit::integer
)
-- One call per row, as `leasectl jobs --json` prints it (json.dumps(indent=2), one element of the
-- list): the keys of JobSummary in its order, then as_of; times in UTC as pydantic writes them
-- (microseconds unless zero, `Z`: leasectl_json_time); floats as Python's repr writes them
-- (leasectl_json_float). The CLI streams these lines as they are, the console validates them
-- into JobAsOf: one rebuild, two readers. Strings are PostgreSQL's JSON (control characters
-- escaped as Python escapes them); a line with non-ASCII characters is escaped by the reader.
-- tests/db/test_audit.py holds these lines to the model's own JSON, byte for byte. concat, not
-- format: format copies its template a character at a time (0.1 s over 100,000 calls).
select concat(
    E'  {\n    "id": "', c.id,
    E'",\n    "tool": ', c.tool_json,
    E',\n    "side_effect": "', c.side_effect,
    E'",\n    "state": "', c.state,
    E'",\n    "owner_id": ', leasectl_json_text(c.owner_id),
    E',\n    "fencing_token": ', c.fencing_token,
    E',\n    "attempt": ', c.attempt,
    E',\n    "max_attempts": ', coalesce(c.max_attempts::text, 'null'),
    E',\n    "idempotency_key": ', leasectl_json_text(c.idempotency_key),
    E',\n    "agent_id": ', leasectl_json_text(c.agent_id),
    E',\n    "session_id": ', leasectl_json_text(c.session_id),
    E',\n    "model": ', leasectl_json_text(c.model),
    E',\n    "provider": ', leasectl_json_text(c.provider),
    E',\n    "parent_id": ', coalesce('"' || c.parent_id || '"', 'null'),
    E',\n    "chain_id": ', coalesce('"' || c.chain_id || '"', 'null'),
    E',\n    "stage": ', c.stage,
    E',\n    "priority": ', c.priority,
    E',\n    "accepted_at": ', leasectl_json_time(c.accepted_at),
    E',\n    "trace_id": ', leasectl_json_text(c.trace_id),
    E',\n    "created_at": ', leasectl_json_time(c.created_at),
    E',\n    "claimed_at": ', leasectl_json_time(c.claimed_at),
    E',\n    "heartbeat_at": null,\n    "lease_until": ', leasectl_json_time(c.lease_until),
    E',\n    "deadline_at": ', leasectl_json_time(c.deadline_at),
    E',\n    "finished_at": ', c.finished_json,
    E',\n    "cancel_requested_at": ', leasectl_json_time(c.cancel_requested_at),
    E',\n    "cancel_requested_by": ', leasectl_json_text(c.cancel_requested_by),
    E',\n    "cancel_requested_reason": ', leasectl_json_text(c.cancel_requested_reason),
    E',\n    "side_effect_started_at": ', c.side_effect_started_json,
    E',\n    "external_request_id": ', c.external_request_json,
    E',\n    "retry_approved_by": ', leasectl_json_text(c.retry_approved_by),
    E',\n    "retry_approved_at": ', leasectl_json_time(c.retry_approved_at),
    E',\n    "retry_approved_reason": ', leasectl_json_text(c.retry_approved_reason),
    E',\n    "terminal_reason": ', c.terminal_reason_json,
    E',\n    "completed_despite_cancel": ', c.completed_despite_cancel_json,
    E',\n    "payload_hash": ', leasectl_json_text(c.payload_hash),
    E',\n    "payload_size": ', coalesce(c.payload_size::text, 'null'),
    E',\n    ', c.sizing_json,
    E',\n    "health": ', leasectl_json_text(c.health),
    E',\n    "db_now": ', c.t_json,
    E',\n    "heartbeat_age_seconds": null,\n    "lease_left_seconds": ',
    leasectl_json_float(case when c.state in ('running', 'cancel_requested')
                             then extract(epoch from c.lease_until - c.t)::float8 end),
    E',\n    "deadline_left_seconds": ', leasectl_json_float(extract(epoch from c.deadline_at - c.t)::float8),
    E',\n    "as_of": ', c.t_json,
    E'\n  }') as line
from chosen c
order by c.created_at desc, c.id desc
