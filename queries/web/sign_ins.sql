-- Purpose: the web console's sign-in journal (migration 0025), newest first: who tried to sign in,
--   from where, what came of it and why; `leasectl audit sign-ins`. person, outcome and since narrow it.
-- Zero rows: nobody tried to sign in (that matches), or the web console was never served here.
-- Parameters: person, outcome, since, lim
-- Optional: person, outcome, since
select s.id, s.at, s.person, s.outcome, s.remote, s.reason, s.db_role
from web_sign_ins s
where (:person::text is null or s.person = :person::text)
  and (:outcome::text is null or s.outcome = :outcome::text)
  and (:since::timestamptz is null or s.at >= :since::timestamptz)
order by s.at desc, s.id desc
limit :lim::int
