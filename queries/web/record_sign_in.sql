-- Purpose: journal one sign-in attempt, sign-out or expired session of the web console (`leasectl
--   serve`, migration 0025): the database stamps the time and the serve process's login; the texts
--   are cut to their columns' sizes and control characters replaced, never refused.
-- Zero rows: never (an error instead: 42501 when the serve process's login is not a member of
--   leasectl_web, or a check violation for an outcome that is not one of the five).
-- Parameters: person, outcome, remote, reason
-- Optional: reason
select public.leasectl_record_sign_in(:person::text, :outcome::text, :remote::text, :reason::text) as id
