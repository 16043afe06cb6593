-- Purpose: benchmark databases only (tests/bench/audit.py): the history of `count` calls, ten
--   events each, written as the triggers of migrations/0001 and 0005 would have written them --
--   same kinds, tokens, owners, leases and previous_lease_until, so `audit verify` finds them
--   clean -- but with their instants spread over a month (call g starts at base + 25 s x g), which
--   needs exact mode (session_replication_role = replica: demo/exact_mode.sql, superuser). Each
--   call: enqueued; claimed by one worker; its request started; a retryable failure (requeued);
--   claimed by a second worker, whose lease runs out; reclaimed by a third; the second's stale
--   result refused; then either an operator cancel (applied) confirmed by the owner, an operator
--   mark-terminal refused or an action failed on a row lock (each one call in twenty), or a
--   request and a receiver refusal; and the end (succeeded, failed one in seven, or cancelled).
--   Rows go in by time, so ids follow time as in a real history.
-- Zero rows: always.
-- Parameters: start, count, base
with calls as (
    select g, md5('audit-bench:' || g)::uuid as id, :base::timestamptz + g * interval '25 seconds' as t0,
           'w-' || (g % 64) as wa, 'w-' || ((g + 21) % 64) as wb, 'w-' || ((g + 42) % 64) as wc,
           'op-' || (g % 40) as op, g % 20 as mix, g % 7 = 0 as fails
    from generate_series(:start::integer + 1, :start::integer + :count::integer) as g
),
steps as (
    select c.*, s.n, c.t0 + (array[0, 1, 2, 10, 20, 95, 96, 97, 98, 100])[s.n] * interval '1 second' as at
    from calls c
    cross join generate_series(1, 10) as s(n)
),
shaped as (
    select st.id as job_id, st.at,
           case st.n
               when 1 then 'enqueued' when 2 then 'claimed' when 3 then 'tool_request_started'
               when 4 then 'state_changed' when 5 then 'claimed' when 6 then 'reclaimed'
               when 7 then 'result_rejected'
               when 8 then case st.mix when 0 then 'operator_cancel' when 1 then 'operator_mark_terminal'
                                        when 2 then 'operator_action_failed' else 'tool_request_started' end
               when 9 then case when st.mix = 0 then 'state_changed' when st.mix in (1, 2) then 'tool_request_started'
                                else 'receiver_rejected' end
               else 'state_changed'
           end as kind,
           case st.n
               when 1 then 'agent-' || (st.g % 50) when 2 then st.wa when 3 then st.wa when 4 then st.wa
               when 5 then st.wb when 6 then st.wc when 7 then st.wb
               when 8 then case when st.mix in (0, 1, 2) then st.op else st.wc end
               when 9 then case when st.mix = 0 then st.op when st.mix in (1, 2) then st.wc else st.wb end
               else st.wc
           end as actor,
           case when st.n = 1 then 0 when st.n <= 4 then 1 when st.n = 5 then 2 when st.n = 7 then 2
                when st.n = 9 and st.mix > 2 then 2 else 3 end as fencing_token,
           case st.n
               when 2 then 'queued' when 3 then 'running' when 4 then 'running' when 5 then 'queued'
               when 6 then 'running' when 8 then case when st.mix in (0, 1) then 'running'
                                                      when st.mix = 2 then null else 'running' end
               when 9 then case when st.mix = 0 then 'running' when st.mix in (1, 2) then 'running' end
               when 10 then case when st.mix = 0 then 'cancel_requested' else 'running' end
           end as state_from,
           case st.n
               when 1 then 'queued' when 2 then 'running' when 3 then 'running' when 4 then 'queued'
               when 5 then 'running' when 6 then 'running'
               when 8 then case when st.mix = 0 then 'cancel_requested' when st.mix = 1 then 'running'
                                when st.mix = 2 then null else 'running' end
               when 9 then case when st.mix = 0 then 'cancel_requested' when st.mix in (1, 2) then 'running' end
               when 10 then case when st.mix = 0 then 'cancelled' when st.fails then 'failed' else 'succeeded' end
           end as state_to,
           case st.n
               when 3 then st.wa when 4 then st.wa when 6 then st.wb
               when 8 then case when st.mix = 2 then null else st.wc end
               when 9 then case when st.mix <= 2 then st.wc end
               when 10 then st.wc
           end as owner_from,
           case st.n
               when 2 then st.wa when 3 then st.wa when 5 then st.wb when 6 then st.wc
               when 8 then case when st.mix = 2 then null else st.wc end
               when 9 then case when st.mix <= 2 then st.wc end
               when 10 then st.wc
           end as owner_to,
           case st.n
               when 2 then st.t0 + interval '61 seconds' when 3 then st.t0 + interval '62 seconds'
               when 5 then st.t0 + interval '80 seconds' when 6 then st.t0 + interval '155 seconds'
               when 8 then case when st.mix > 2 then st.t0 + interval '157 seconds' end
               when 9 then case when st.mix = 0 then st.t0 + interval '157 seconds'
                                when st.mix in (1, 2) then st.t0 + interval '158 seconds' end
           end as lease_until,
           case when st.n = 8 and st.mix in (0, 1, 2) then
               case st.mix when 0 then 'user left' when 1 then 'looked stuck' else 'stuck' end end as reason,
           case when st.n = 8 and st.mix in (0, 1, 2) then md5('request:' || st.g)::uuid end as request_id,
           case st.n
               when 1 then jsonb_build_object('tool', 'bench_audit', 'idempotency_key', 'audit-bench:' || st.g,
                                              'payload_hash', 'h')
               when 2 then jsonb_build_object('attempt', 1, 'previous_token', 0)
               when 3 then jsonb_build_object('external_request_id', 'req-' || st.g)
               when 4 then jsonb_build_object('attempt', 1, 'previous_lease_until',
                                              to_jsonb(st.t0 + interval '70 seconds'))
               when 5 then jsonb_build_object('attempt', 2, 'previous_token', 1)
               when 6 then jsonb_build_object('attempt', 3, 'previous_token', 2, 'previous_lease_until',
                                              to_jsonb(st.t0 + interval '85 seconds'))
               when 7 then jsonb_build_object('reason', 'zero_rows')
               when 8 then case st.mix
                   when 0 then jsonb_build_object('outcome', 'applied', 'seen_state', 'running', 'seen_token', 3)
                   when 1 then jsonb_build_object('outcome', 'refused', 'seen_state', 'running', 'seen_token', 2,
                                                  'terminal_state', 'failed', 'force', false,
                                                  'refusal', 'the call changed since you looked')
                   when 2 then jsonb_build_object('action', 'cancel', 'outcome', 'not_applied',
                                                  'error', 'row is locked by another transaction (lock_timeout)',
                                                  'cause', 'lock_timeout', 'seen_state', 'running', 'seen_token', 3)
                   else jsonb_build_object('external_request_id', 'req-' || st.g || '-b') end
               when 9 then case when st.mix = 0 then jsonb_build_object('attempt', 3, 'previous_lease_until',
                                                                       to_jsonb(st.t0 + interval '157 seconds'))
                                when st.mix in (1, 2) then jsonb_build_object('external_request_id', 'req-' || st.g || '-c')
                                else jsonb_build_object('external_request_id', 'req-' || st.g, 'highest_fence', 3) end
               else jsonb_strip_nulls(jsonb_build_object(
                        'attempt', 3, 'previous_lease_until', to_jsonb(st.t0 + interval '158 seconds'),
                        'terminal_reason', case when st.mix = 0 then 'cancel confirmed by the worker'
                                                when st.fails then 'failed: not retryable' end))
           end as details
    from steps st
)
insert into job_events (job_id, at, kind, actor, fencing_token, state_from, state_to, owner_from, owner_to,
                        lease_until, reason, request_id, details)
select job_id, at, kind, actor, fencing_token, state_from, state_to, owner_from, owner_to, lease_until, reason,
       request_id, details
from shaped
order by at, kind
