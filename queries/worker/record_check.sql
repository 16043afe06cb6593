-- Purpose: record what the service said about an earlier request of this call before repeating
--   it (docs/seeds.md §004: a verifiable side effect is checked, never assumed): found = done
--   (it happened: complete the call with what the service returned), not_done (it did not:
--   start_side_effect.sql may send it again, under this token), unknown (nobody can say: the call
--   goes to outcome_unknown and a human decides). Journaled by the database as
--   side_effect_checked with found, the request id and details.
-- Zero rows: not the owner any more (lease lost, fenced, cancelled and confirmed, finished):
--   the check is not recorded; stop.
-- Parameters: job_id, worker_id, fencing_token, found (done | not_done | unknown), details (jsonb)
update tool_jobs
set state         = case when :found::text = 'unknown' then 'outcome_unknown' else state end,
    lease_until   = case when :found::text = 'unknown' then null else lease_until end,
    checked_at    = now(),
    check_found   = :found::text,
    check_token   = fencing_token,
    check_details = :details::jsonb
where id = :job_id::uuid
  and state in ('running', 'cancel_requested')
  and owner_id = :worker_id::text
  and fencing_token = :fencing_token::bigint
  and lease_until > now()
returning id, state, check_found, checked_at, external_request_id, lease_until, now() as db_now
