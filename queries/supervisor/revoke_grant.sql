-- Purpose: revoke a grant in the name `revoker`: 'control-plane', or an ancestor of the holder in
--   its delegation chain. Who may is decided by the database from the session's login, never from
--   the name written (migration 0012): the control plane (leasectl_supervisor) revokes any grant;
--   a worker login only the grants of descendants of an agent it registered itself, in that
--   agent's name. The name is recorded in revoked_by and in the fleet journal beside db_role.
-- Zero rows: not allowed (this login may not revoke in that name), already revoked, or no such grant.
-- Parameters: grant_id, revoker
update grants g
set revoked_at = now(),
    revoked_by = :revoker::text
where g.id = :grant_id::uuid
  and g.revoked_at is null
  and leasectl_may_revoke(g.agent_id, :revoker::text)
returning g.id, g.agent_id, g.kind, g.resource, g.revoked_at, g.revoked_by
