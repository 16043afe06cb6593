-- Purpose: the bulk operations the supervisor works in the background (console/control/
--   supervisor.py): running ones started with --background, or whose last progress is older than
--   `idle_seconds` (their CLI was stopped or killed: the supervisor resumes them), and stopping ones
--   (to close them once their batches in flight have committed). Oldest first.
-- Zero rows: nothing for the supervisor to do.
-- Parameters: idle_seconds, limit
select o.id, o.state, o.action, o.total, o.done
from bulk_operations o
where o.state in ('running', 'stopping')
  and (o.state = 'stopping' or o.background
       or o.updated_at < now() - make_interval(secs => :idle_seconds::float8))
order by o.created_at
limit :limit::integer
