-- Purpose: benchmark and test databases only (tests/bench/payload.py, tests/db/test_payload_filter.py):
--   finished calls g = start+1 .. start+count, call g created at base + 2 s x g, with the payloads of
--   five tools as agents send them: bench_pay 1% (an invoice: {"invoice": "INV-<g>", "amount",
--   "currency", "customer": {...}, "lines": [{"sku", "qty"}, ...]}), bench_search 49% (a query),
--   bench_fetch 25% (a url and headers), bench_browse 15% (a task with a 4 KB page context: stored
--   out of line, TOASTed) and bench_sql 10% (a statement). Succeeded, failed (g % 20 = 7) or
--   cancelled (g % 50 = 13). Written in exact mode (session_replication_role = replica, superuser:
--   demo/exact_mode.sql); the five tools registered first.
-- Zero rows: always.
-- Parameters: start, count, base
insert into tool_jobs (id, chain_id, tool, state, owner_id, fencing_token, attempt, idempotency_key, payload,
                       payload_hash, result, created_at, claimed_at, finished_at, cancel_requested_at,
                       cancel_requested_by, cancel_requested_reason, terminal_reason, agent_id)
select md5('payload-bench:' || g)::uuid, md5('payload-bench:' || g)::uuid, c.tool,
       case when g % 50 = 13 then 'cancelled' when g % 20 = 7 then 'failed' else 'succeeded' end,
       'w-' || (g % 64), 1, 1, 'payload-bench:' || g,
       case c.tool
           when 'bench_pay' then jsonb_build_object(
               'invoice', 'INV-' || g, 'amount', (g % 5000) + 0.25 * (g % 4),
               'currency', (array['EUR', 'USD', 'GBP'])[1 + g % 3],
               'customer', jsonb_build_object('id', 'cus-' || (g % 20011), 'country',
                                              (array['DE', 'FR', 'US', 'GB', 'NL'])[1 + g % 5], 'vip', g % 9 = 0),
               'lines', jsonb_build_array(jsonb_build_object('sku', 'SKU-' || (g % 997), 'qty', 1 + g % 5),
                                          jsonb_build_object('sku', 'SKU-' || ((g * 7) % 997), 'qty', 1)))
           when 'bench_search' then jsonb_build_object(
               'query', 'quarterly report ' || md5('q' || g) || ' site:example.com', 'max_results', 10 + g % 3 * 10,
               'locale', (array['en-US', 'de-DE', 'fr-FR'])[1 + g % 3])
           when 'bench_fetch' then jsonb_build_object(
               'url', 'https://example.com/docs/' || md5('u' || g) || '.html',
               'headers', jsonb_build_object('accept', 'text/html', 'user-agent', 'agent/1.0'), 'timeout_s', 30)
           when 'bench_browse' then jsonb_build_object(
               'task', 'find the pricing page of vendor ' || (g % 1000), 'max_steps', 25,
               'context', (select string_agg(md5(g || ':' || i), ' ') from generate_series(1, 120) as i))
           else jsonb_build_object(
               'sql', 'select * from orders where customer_id = ' || (g % 20011) || ' limit 100',
               'database', 'analytics')
       end,
       'h', case when g % 50 <> 13 and g % 20 <> 7 then '{"ok": true}'::jsonb end,
       c.t0, c.t0 + interval '1 second', c.t0 + interval '20 seconds',
       case when g % 50 = 13 then c.t0 + interval '10 seconds' end,
       case when g % 50 = 13 then 'op-' || (g % 40) end,
       case when g % 50 = 13 then 'user left' end,
       case when g % 50 = 13 then 'cancel confirmed by the worker' when g % 20 = 7 then 'failed: not retryable' end,
       'agent-' || (g % 50)
from (select g, :base::timestamptz + g * interval '2 seconds' as t0,
             case when g % 100 = 0 then 'bench_pay' when g % 100 < 50 then 'bench_search'
                  when g % 100 < 75 then 'bench_fetch' when g % 100 < 90 then 'bench_browse'
                  else 'bench_sql' end as tool
      from generate_series(:start::integer + 1, :start::integer + :count::integer) as g) c
