-- Purpose: resolve a bulk operation named by a prefix of its id: the ids in the range the prefix
--   spans (the caller turns "8f1b" into 8f1b0000-... .. 8f1bffff-...). Two rows back = ambiguous.
-- Zero rows: no operation has an id with that prefix.
-- Parameters: id_low, id_high
select id, state, action, created_at
from bulk_operations
where id between :id_low::uuid and :id_high::uuid
order by id
limit 5
