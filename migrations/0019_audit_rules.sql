-- 0019: one filter for the auditor's events, one classification for the past's rebuild, one
-- answer to "when did this call start, and when did it last leave running". The Audit screen's page (queries/audit/events_page.sql),
-- the export's count (audit/export_count.sql) and its two formats (audit/export_csv.sql,
-- audit/export_jsonl.sql) each wrote the same six conditions out, the list of the operators'
-- event kinds among them; a change to one (a new operator action) had to be made four times, and
-- a page and its export could come to disagree about which events match the same filter.
--
--   leasectl_audit_event_matches   whether one job_events row matches the filter; every filter
--                                  argument null means "no filter". Plain SQL that reads no table:
--                                  PostgreSQL inlines it into each statement, so the planner still
--                                  sees `job_id = $n` and `at >= $n` (job_events_job_idx, the
--                                  primary key's order) as it did when they were written out.
--   leasectl_is_operator_event     the job_events kinds an operator's action writes (applied,
--                                  refused or failed): what `operator:` matches.
--   leasectl_rebuild_class         what an event is to audit/jobs_at.sql's rebuild of every call as
--                                  it was at T (0 nothing to it, 1 a grant, 2 a state change, 3 a
--                                  fence, 4 a request started, 5 an operator's cancel, 6 an approved
--                                  retry, 7 a rejection); each of its two branches wrote the CASE
--                                  out. Inlined, parallel safe: the same expression in each plan.
--   agents_capped_idx              the agents with a cap (max_running), which every claim reads
--                                  (queries/worker/claim.sql: full_caps)
--   leasectl_call_span             a call's first claim (started_at) and the last time it left
--                                  running without finishing there (left_running_at), from its
--                                  history: the chain story (views/chain.sql) and the chains list
--                                  (views/chains.sql) each wrote the two aggregates out.

create function public.leasectl_rebuild_class(p_kind text) returns integer
language sql immutable parallel safe as $$
    -- the common kinds first
    select case p_kind when 'state_changed' then 2 when 'claimed' then 1 when 'tool_request_started' then 4
                       when 'reclaimed' then 1 when 'result_rejected' then 7 when 'enqueued' then 0
                       when 'receiver_rejected' then 7 when 'heartbeat_lost' then 7 when 'side_effect_started' then 4
                       when 'fenced' then 3 when 'operator_cancel' then 5 when 'operator_approve_retry' then 6
                       else 0 end
$$;

create function public.leasectl_is_operator_event(p_kind text) returns boolean
language sql immutable parallel safe as $$
    select p_kind operator(pg_catalog.=) any (array['operator_cancel', 'operator_mark_terminal',
                                                    'operator_approve_retry', 'operator_action_failed'])
$$;

create function public.leasectl_audit_event_matches(
    p_job_id uuid, p_at timestamptz, p_kind text, p_actor text, p_owner_from text, p_owner_to text,
    f_job_id uuid, f_since timestamptz, f_until timestamptz, f_owner text, f_operator text, f_kind text
) returns boolean
language sql immutable parallel safe as $$
    select (f_job_id is null or p_job_id operator(pg_catalog.=) f_job_id)
       and (f_since is null or p_at operator(pg_catalog.>=) f_since)
       and (f_until is null or p_at operator(pg_catalog.<=) f_until)
       and (f_owner is null or p_owner_to operator(pg_catalog.=) f_owner
            or p_owner_from operator(pg_catalog.=) f_owner or p_actor operator(pg_catalog.=) f_owner)
       and (f_operator is null
            or (public.leasectl_is_operator_event(p_kind) and p_actor operator(pg_catalog.=) f_operator))
       and (f_kind is null or p_kind operator(pg_catalog.=) f_kind)
$$;

create function public.leasectl_call_span(p_job_id uuid, out started_at timestamptz,
                                          out left_running_at timestamptz)
language sql stable set search_path = pg_catalog, public, pg_temp as $$
    select min(e.at) filter (where e.kind in ('claimed', 'reclaimed')),
           max(e.at) filter (where e.state_from in ('running', 'cancel_requested')
                               and e.state_to not in ('running', 'cancel_requested'))
    from public.job_events e
    where e.job_id = p_job_id
$$;

-- The claim counts each capped agent's running calls once per statement (queries/worker/claim.sql,
-- full_caps): the agents with a cap found by index, not by reading every agent at each claim.
create index agents_capped_idx on public.agents (id) where max_running is not null;

insert into leasectl_migrations (version, name) values (19, '0019_audit_rules')
on conflict (version) do nothing;
