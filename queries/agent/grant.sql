-- Purpose: record a grant an agent's session holds (a credential, a file lock, a queue
--   reservation, a rate-limit token), issued by an ancestor or the control plane, with its expiry.
--   Refused for an agent that is not running.
-- Zero rows: no such agent, or it is not running.
-- Parameters: agent_id, kind, resource, issued_by, expires_at
insert into grants (agent_id, kind, resource, issued_by, expires_at)
select a.id, :kind::text, :resource::text, :issued_by::text, :expires_at::timestamptz
from agents a
where a.id = :agent_id::text and a.state = 'running'
returning id, agent_id, kind, resource, issued_by, issued_at, expires_at
