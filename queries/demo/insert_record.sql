-- Purpose: insert one fixture reconciliation record as given (exact mode only).
-- Zero rows: never.
-- Parameters: id, shutdown_id, written_by, written_at, in_flight, grants_revoked, grants_expired,
--   children_confirmed, children_unaccounted
insert into reconciliation_records (id, shutdown_id, written_by, written_at, in_flight, grants_revoked,
                                    grants_expired, children_confirmed, children_unaccounted)
values (:id::uuid, :shutdown_id::uuid, :written_by::text, :written_at::timestamptz, :in_flight::jsonb,
        :grants_revoked::jsonb, :grants_expired::jsonb, :children_confirmed::jsonb,
        :children_unaccounted::jsonb)
returning id
