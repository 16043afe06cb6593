-- Purpose: the operator journal across every call and every shutdown, newest first. A call's
--   cancel, mark terminal and approve retry are job_events operator_cancel / operator_mark_terminal
--   / operator_approve_retry (outcome applied or refused, from details.outcome); an action that
--   never reached its guard (a row lock, a statement timeout) is operator_action_failed with
--   details.action and details.cause (outcome failed). A drain or an abort of a subtree is
--   fleet_events shutdown_requested (applied) or shutdown_refused (refused), details.mode; a tool's
--   pause and resume (migration 0016) fleet_events tool_paused / tool_resumed (action pause or
--   resume, applied; details.tool names the tool), and an operator's revocation of a grant
--   (migration 0017) fleet_events operator_revoke (action revoke, applied; details.grant_id, kind
--   and resource; the agent is the grant's holder), and a decision on a proposed shutdown
--   (migration 0018) fleet_events shutdown_accepted / shutdown_declined (action accept or
--   decline, applied; details.mode and proposed_by), and retention's removal of an archived month
--   (migration 0021) fleet_events history_archived (action retention, applied; details.month,
--   rows, first_id, last_id, sha256, file), and a bulk operation's start and stop (migration 0023)
--   fleet_events bulk_started (action bulk, applied) and bulk_stop_requested / bulk_stop_refused
--   (action bulk_stop, applied or refused; details.operation_id, total, done; each call it acted on
--   is its own operator_* row whose details.batch_id is the operation's id). An agent's own refused proposal is not an
--   operator's action and is left out. Filters
--   combine; each null means no filter. A call's agent is tool_jobs.agent_id (it never changes);
--   a shutdown's agent is the subtree's root; job_id selects calls only (a shutdown is no call's).
--   Served by job_events_operator_idx / fleet_events_operator_idx (actor, at) for one operator,
--   job_events_notable_idx and fleet_events_operator_at_idx (at) otherwise (migration 0007).
--   db_role is the login that wrote the row (null before migration 0005); operator is the name it
--   gave. A null limit is no limit: the Audit screen's export of the journal streams every row.
-- Zero rows: no operator action matches.
-- Parameters: operator, job_id, agent, action, outcome, since, until, limit
with journal as (
    -- the newest call rows first, the call's agent looked up only for the rows kept (a join before
    -- the limit read every row of the range on the partitioned history, migration 0021: the
    -- planner cannot see how many one operator has in each month); --agent alone needs it first
    select e.*
    from job_events e
    where e.kind in ('operator_cancel', 'operator_mark_terminal', 'operator_approve_retry',
                     'operator_action_failed')
      and (:operator::text is null or e.actor = :operator::text)
      and (:job_id::uuid is null or e.job_id = :job_id::uuid)
      and (:agent::text is null
           or exists (select 1 from tool_jobs a where a.id = e.job_id and a.agent_id = :agent::text))
      and (:since::timestamptz is null or e.at >= :since::timestamptz)
      and (:until::timestamptz is null or e.at <= :until::timestamptz)
      and (:action::text is null
           or case when e.kind = 'operator_action_failed' then e.details ->> 'action'
                   else substr(e.kind, 10) end = :action::text)
      and (:outcome::text is null
           or case when e.kind = 'operator_action_failed' then 'failed'
                   else e.details ->> 'outcome' end = :outcome::text)
    order by e.at desc, e.id desc
    limit :limit::integer
),
calls as (
    select e.id as event_id, e.at, e.actor as operator,
           case when e.kind = 'operator_action_failed' then e.details ->> 'action'
                else substr(e.kind, 10) end as action,
           case when e.kind = 'operator_action_failed' then 'failed'
                else e.details ->> 'outcome' end as outcome,
           e.job_id, j.agent_id, e.reason, e.request_id, e.fencing_token, e.details, 'call' as source,
           e.db_role
    from journal e
    left join tool_jobs j on j.id = e.job_id
),
fleet as (
    select f.id as event_id, f.at, f.actor as operator,
           case f.kind when 'tool_paused' then 'pause' when 'tool_resumed' then 'resume'
                       when 'operator_revoke' then 'revoke'
                       when 'shutdown_accepted' then 'accept' when 'shutdown_declined' then 'decline'
                       when 'history_archived' then 'retention'
                       when 'bulk_started' then 'bulk'
                       when 'bulk_stop_requested' then 'bulk_stop' when 'bulk_stop_refused' then 'bulk_stop'
                       else f.details ->> 'mode' end as action,
           case when f.kind in ('shutdown_refused', 'bulk_stop_refused') then 'refused' else 'applied' end as outcome,
           null::uuid as job_id, f.agent_id, f.reason, f.request_id, null::bigint as fencing_token,
           f.details || jsonb_strip_nulls(jsonb_build_object('shutdown_id', f.shutdown_id,
                                                             'grant_id', f.grant_id)) as details,
           'fleet' as source, f.db_role
    from fleet_events f
    where f.kind in ('shutdown_requested', 'shutdown_refused', 'tool_paused', 'tool_resumed', 'operator_revoke',
                     'shutdown_accepted', 'shutdown_declined', 'history_archived', 'bulk_started',
                     'bulk_stop_requested', 'bulk_stop_refused')
      and not (f.kind = 'shutdown_refused' and f.details ? 'proposal')
      and :job_id::uuid is null
      and (:operator::text is null or f.actor = :operator::text)
      and (:agent::text is null or f.agent_id = :agent::text)
      and (:since::timestamptz is null or f.at >= :since::timestamptz)
      and (:until::timestamptz is null or f.at <= :until::timestamptz)
      and (:action::text is null
           or case f.kind when 'tool_paused' then 'pause' when 'tool_resumed' then 'resume'
                          when 'operator_revoke' then 'revoke'
                       when 'shutdown_accepted' then 'accept' when 'shutdown_declined' then 'decline'
                       when 'history_archived' then 'retention'
                       when 'bulk_started' then 'bulk'
                       when 'bulk_stop_requested' then 'bulk_stop' when 'bulk_stop_refused' then 'bulk_stop'
                       else f.details ->> 'mode' end = :action::text)
      and (:outcome::text is null
           or case when f.kind in ('shutdown_refused', 'bulk_stop_refused') then 'refused' else 'applied' end = :outcome::text)
    order by f.at desc, f.id desc
    limit :limit::integer
)
select * from (select * from calls union all select * from fleet) journal
order by at desc, source, event_id desc
limit :limit::integer
