-- Purpose: revoke a grant. Any ancestor of the holder in the delegation chain may, and the
--   control plane ('control-plane', the supervisor role) may; nobody else (the database refuses
--   any other revoker whatever SQL is sent).
-- Zero rows: not allowed (the revoker is neither an ancestor nor the control plane), already
--   revoked, or no such grant.
-- Parameters: grant_id, revoker
update grants g
set revoked_at = now(),
    revoked_by = :revoker::text
where g.id = :grant_id::uuid
  and g.revoked_at is null
  and (:revoker::text = 'control-plane' or leasectl_is_ancestor(:revoker::text, g.agent_id))
returning g.id, g.agent_id, g.kind, g.resource, g.revoked_at, g.revoked_by
