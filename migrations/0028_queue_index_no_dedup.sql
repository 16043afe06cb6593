-- 0028: the indexes of calls in passing states keep one entry per call version (no deduplication),
-- so that a claim steps over each call claimed before it once, not again at every claim.
--
-- B-tree deduplication (PostgreSQL 13+) packs the entries of equal keys into one posting list.
-- Calls enqueued in one transaction share created_at (now()) and, most of the time, priority: the
-- queue's index (tool_jobs_queued_idx, priority desc, created_at) then holds them as posting lists
-- of up to a few hundred calls. A claim leaves the entry of the call it takes dead (the call is no
-- longer queued), and an index scan marks an entry dead for every later scan only when every call
-- in its posting list is: until a vacuum, each claim walked again, in the heap, past every call
-- claimed from the same list before it (on average half a list per claim) and then compared them
-- all to mark them (_bt_killitems). Measured with callgrind, the reference worker's server
-- instructions per call, 400 calls enqueued at once: 2.74 M with deduplication, 2.35 M without
-- (README, "The queue's index and its posting lists").
--
-- Without deduplication each dead entry is marked at the first scan that meets it, and every later
-- scan skips it without a visit to the heap. The same holds for the other partial indexes over
-- states a call passes through (running, cancel_requested, outcome_unknown): counts under a cap and
-- the search for expired leases walk them. Their entries live as long as a call runs, so packing
-- them saved little space. Rebuilt here (each holds only the calls in those states: small).

alter index public.tool_jobs_queued_idx set (deduplicate_items = off);
alter index public.tool_jobs_live_idx set (deduplicate_items = off);
alter index public.tool_jobs_agent_live_idx set (deduplicate_items = off);
alter index public.tool_jobs_agent_running_idx set (deduplicate_items = off);
reindex index public.tool_jobs_queued_idx;
reindex index public.tool_jobs_live_idx;
reindex index public.tool_jobs_agent_live_idx;
reindex index public.tool_jobs_agent_running_idx;

insert into leasectl_migrations (version, name) values (28, '0028_queue_index_no_dedup')
on conflict (version) do nothing;
