"""`leasectl doctor`: is this database fit for leasectl, and if not, what exactly to do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import humanize

from console.db.connect import Conn, Row, connect, find_pooler, run, run_one
from console.db.migrate import applied_versions, known_version
from console.db.pooler import pooler_of, pooler_setting
from console.shared.errors import LeasectlError
from console.shared.text import counted, listed

Status = Literal["ok", "warn", "fail"]

GROUP_ROLES = ("leasectl_worker", "leasectl_operator", "leasectl_auditor", "leasectl_supervisor")
EXPECTED_TRIGGERS = {
    "tool_jobs_guard_insert", "tool_jobs_guard_update", "tool_jobs_journal_insert",
    "tool_jobs_journal_update", "tool_jobs_autoregister_tool", "job_events_no_update_delete",
    "job_events_no_truncate", "job_events_kind_guard",
    # the fleet (docs/seeds.md §003): shutdown, grant and agent guards, the fleet journal, append-only records
    "shutdowns_guard", "grants_guard", "agents_guard", "agents_journal", "shutdowns_journal",
    "grants_journal", "reconciliation_records_append_only", "reconciliation_records_no_truncate",
    "fleet_events_append_only", "fleet_events_no_truncate",
    # who may write what (0005, 0013): nobody but the database writes the fleet's journal
    "fleet_events_guard",
    # an agent is owned by the login that registered it and born running under a running parent
    # (0012, 0013); it confirms only its own stop, once; grants are issued unrevoked, in a name
    # the login may speak for
    "agents_insert_guard", "agents_seen_guard", "grants_insert_guard",
}
WORKER_POLICY = "tool_jobs_worker_update"
TIMEOUTS = ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")


@dataclass
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


def diagnose(dsn: str) -> list[Check]:
    """Run every check; a connection failure is itself a (failed) check, not an exception."""
    try:
        conn = connect(dsn)
    except LeasectlError as exc:
        return [Check("connection", "fail", str(exc),
                      exc.hint or "check --dsn, LEASECTL_DSN, DATABASE_URL or PG* variables")]
    with conn:
        checks = [_server(conn), _pooler(conn), _replication(conn)]
        schema = _schema(conn)
        checks.append(schema)
        if schema.status == "fail" and "no leasectl schema" in schema.detail:
            return checks
        checks += [_triggers(conn), *_shadowing(conn), *_lock_holders(conn), *_roles(conn), *_identity(conn),
                   *_tools(conn), *_activity(conn), _history(conn)]
    return checks


def _the_row(conn: Conn, name: str) -> Row:
    """The one row of a query that always answers one (its header: `Zero rows: never`)."""
    row = run_one(conn, name)
    assert row is not None
    return row


def _server(conn: Conn) -> Check:
    row = _the_row(conn, "meta/doctor_server")
    status: Status = "ok" if row["server_version_num"] >= 150000 else "warn"
    detail = (f"PostgreSQL {row['server_version']}, database {row['database']}, role {row['role']}"
              + (" (superuser)" if row["superuser"] else ""))
    return Check("connection", status, detail,
                 "" if status == "ok" else "leasectl is tested on PostgreSQL 15 and 18")


def _pooler(conn: Conn) -> Check:
    """Whether a connection pooler stands between leasectl and the server, and what it changes."""
    pooler = pooler_of(conn)
    if pooler is None and pooler_setting() == "none":
        # LEASECTL_POOLER=none skips the question when leasectl connects: the doctor asks anyway
        found = find_pooler(conn, "auto")
        if found is None:
            return Check("pooler", "ok", "none (LEASECTL_POOLER=none, and the server process that answers is the "
                         "one the connection started with)")
        return Check("pooler", "warn", "LEASECTL_POOLER=none, but a connection pooler stands in between "
                     f"({found.how}): if it pools by transaction, leasectl's session settings reach other "
                     "clients, and its prepared statements and LISTEN break",
                     "unset LEASECTL_POOLER (auto finds it), or set it to transaction or session")
    if pooler is None:
        return Check("pooler", "ok", "none: connected to the server itself (the process that answers is the one "
                     "the connection started with)")
    what = "; ".join(pooler.changes())
    if pooler.keeps_sessions:
        return Check("pooler", "ok", f"a connection pooler that keeps sessions ({pooler.how}): {what}")
    return Check("pooler", "warn", f"a connection pooler in transaction mode ({pooler.how}). What changes: {what}",
                 "give the pool enough server connections for the statements leasectl runs at once (each worker's "
                 "claims and heartbeats run side by side): a heartbeat queued in the pooler waits against its "
                 "lease (PgBouncer: default_pool_size, reserve_pool_size, query_wait_timeout). "
                 "LEASECTL_POOLER=session if the pooler keeps sessions")


def _replication(conn: Conn) -> Check:
    """What a completion a worker was told about is worth here: whether a commit waits for a
    standby (synchronous replication), so that it survives a failover to that standby."""
    row = _the_row(conn, "meta/doctor_replication")
    if row["in_recovery"]:
        return Check("replication", "warn", "this server is a standby (read-only): workers and actions need the "
                     "primary", "use the primary, or every node with target_session_attrs=read-write; a "
                     "standby belongs in a context's read_dsn")
    replicas, sync = int(row["replicas"]), row["sync_replicas"]
    commit = row["synchronous_commit"]
    if replicas == 0:
        return Check("replication", "ok", "no standby streams from this server: a completion a worker was told "
                     "about is as safe as this server's disk; a failover to a backup loses what came after it")
    if sync is None:
        return Check("replication", "warn", f"{replicas} standby(s) stream from this server; whether a commit "
                     f"waits for one is hidden from this role (synchronous_standby_names = "
                     f"'{row['synchronous_standby_names']}', synchronous_commit = {commit})",
                     "grant pg_read_all_stats to the role that runs doctor to see the standbys' sync state")
    if sync > 0 and commit in ("on", "remote_write", "remote_apply"):
        return Check("replication", "ok", f"synchronous replication: {sync} of {replicas} standby(s) confirm each "
                     f"commit (synchronous_commit = {commit}): a completion a worker was told about survives a "
                     "failover to a synchronous standby")
    return Check("replication", "warn", f"asynchronous replication ({replicas} standby(s), "
                 f"{'none synchronous' if not sync else f'synchronous_commit = {commit}'}): a failover can lose "
                 "the last commits before it. Their calls come back and run again (read-only, verifiable tools) "
                 "or stop in outcome_unknown (an unverifiable request that went out): a completion a worker was "
                 "told about is worth this server's disk until a standby has it",
                 "Patroni: synchronous_mode: true; plain PostgreSQL: synchronous_standby_names and "
                 "synchronous_commit = on")


def _history(conn: Conn) -> Check:
    """The history's size, where it begins, how fast it grows, and whether its months ahead exist
    (migration 0021). Nothing is ever dropped without `leasectl admin retention`."""
    row = _the_row(conn, "meta/doctor_history")
    size = humanize.naturalsize(row["bytes"], binary=True)
    if row["first_id"] is None:
        growth = "no event yet"
    else:
        days = max((row["last_at"] - row["first_at"]).total_seconds() / 86_400, 1 / 24)
        events = row["last_id"] - row["first_id"] + 1  # ids: identity order, gaps from rolled back writes
        per_day = events / days
        growth = (f"~{counted(round(per_day), 'event')}/day, "
                  f"~{humanize.naturalsize(row['bytes_holding_rows'] / days, binary=True)}/day")
    begins = (f"oldest month online {row['first_at']:%Y-%m} (since {row['first_at']:%Y-%m-%d})" if row["first_at"]
              else "empty")
    archived = (f"; {counted(row['archived_months'], 'month')} before {row['archived_before']:%Y-%m-%d} archived "
                "(`leasectl audit verify --archive DIR`)" if row["archived_before"] else
                "; nothing archived: nothing is dropped without `leasectl admin retention`")
    detail = (f"{size} online, {begins}, {growth}; partitions through "
              f"{row['newest_partition']:%Y-%m}{archived}")
    if not row["this_month"]:
        return Check("history", "fail", f"this month has no partition: every event lands in job_events_default. "
                     f"{detail}", "run `leasectl migrate` (or a supervisor), which create the months ahead")
    if row["default_rows"] or not row["next_month"]:
        why = ("job_events_default holds rows (their month had no partition in time)" if row["default_rows"]
               else "next month has no partition yet")
        return Check("history", "warn", f"{why}. {detail}",
                     "run `leasectl migrate` or keep a supervisor running: either creates the months ahead and "
                     "moves such rows into them")
    return Check("history", "ok", detail)


def _schema(conn: Conn) -> Check:
    applied = applied_versions(conn)
    known = known_version()
    if not applied:
        return Check("schema", "fail", "no leasectl schema in this database", "run `leasectl migrate`")
    current = max(applied)
    if current > known:
        return Check("schema", "fail", f"version {current} is newer than this leasectl ({known})",
                     "upgrade leasectl")
    if current < known:
        return Check("schema", "fail", f"version {current}, this leasectl needs {known}",
                     "run `leasectl migrate`")
    unrecorded = [v for v, row in applied.items() if not row["checksum"]]
    if unrecorded:
        return Check("schema", "warn", f"version {current}; migrations {unrecorded} applied by psql "
                     "without a checksum", "run `leasectl migrate` once to record them")
    return Check("schema", "ok", f"version {current} (current)")


def _triggers(conn: Conn) -> Check:
    rows = run(conn, "meta/doctor_triggers")
    present = {r["name"] for r in rows}
    disabled = sorted(r["name"] for r in rows if not r["enabled"])
    missing = sorted(EXPECTED_TRIGGERS - present)
    if missing or disabled:
        return Check("state machine", "fail", listed(("missing:", missing), ("DISABLED:", disabled)),
                     "the database no longer enforces the protocol: re-enable with "
                     "ALTER TABLE ... ENABLE TRIGGER, or re-create the schema")
    return Check("state machine", "ok", f"{len(present)} triggers enforce transitions and history")


def _lock_holders(conn: Conn) -> list[Check]:
    """Whether a worker login's transaction held open on the fleet's rows can be ended (0015)."""
    row = run_one(conn, "meta/doctor_lock_holders")
    if row is None:
        return []
    if row["can_end"]:
        return [Check("held locks", "ok", "the control plane ends a worker session that holds the fleet's rows "
                      "in one transaction for over 10 s")]
    return [Check("held locks", "warn",
                  f"{row['owner']} (the schema's owner) can neither see nor end other sessions: a worker login "
                  "that keeps a transaction open on the fleet's rows can hold up heartbeats and drains",
                  f"GRANT pg_read_all_stats, pg_signal_backend TO {row['owner']};")]


def _shadowing(conn: Conn) -> list[Check]:
    """Whether a login's own objects could stand in for what the rules read (migration 0012)."""
    row = _the_row(conn, "meta/doctor_shadowing")
    checks = []
    if row["unsafe_functions"]:
        checks.append(Check("temporary objects", "fail",
                            "guard functions that search a login's temporary tables before the schema's: "
                            + ", ".join(row["unsafe_functions"]),
                            "run `leasectl migrate` (0012 sets search_path = pg_catalog, public, pg_temp)"))
    else:
        temp = ", ".join(row["temp_roles"])
        checks.append(Check(
            "temporary objects", "ok",
            "every guard searches pg_temp last: a login's temporary tables cannot stand in for leasectl's"
            + (f" ({temp} may create them; leasectl needs none: REVOKE TEMPORARY ON DATABASE "
               f"{row['database']} FROM PUBLIC takes that away from every role that is not granted it "
               "again)" if temp else "")))
    if row["create_grants"]:
        checks.append(Check("schemas", "warn",
                            "leasectl roles may create objects in: " + ", ".join(row["create_grants"])
                            + " (a login's own schema ahead of pg_catalog could define operators that "
                            "the row level security policy then uses)",
                            "REVOKE CREATE ON SCHEMA <schema> FROM PUBLIC, <role>; (PostgreSQL 15's "
                            "default for the public schema)"))
    return checks


def _roles(conn: Conn) -> list[Check]:
    rows = run(conn, "meta/doctor_roles")
    groups = {r["group_role"] for r in rows}
    missing = [g for g in GROUP_ROLES if g not in groups]
    checks = []
    if missing:
        checks.append(Check("roles", "warn", f"missing group roles: {', '.join(missing)}",
                            "run `leasectl migrate` as a role with CREATEROLE"))
    else:
        checks.append(Check("roles", "ok", ", ".join(GROUP_ROLES)))
    fixes = []
    for r in rows:
        if not r["member"] or not r["member_can_login"]:
            continue
        member_values = settings_of(r["member_settings"])
        # a timeout of 0 is no timeout: a login may set that on itself (ALTER ROLE of one's own role)
        lacking = [t for t in TIMEOUTS if member_values.get(t, "0").strip().lower() in ("0", "0s", "0ms")]
        if lacking:
            group_values = settings_of(r["group_settings"])
            for t in lacking:
                value = group_values.get(t, "5s")
                fixes.append(f"ALTER ROLE {r['member']} SET {t} = '{value}';")
    if fixes:
        checks.append(Check("login roles", "warn",
                            "login roles lack the timeouts of their leasectl group "
                            "(role settings are not inherited)", "\n".join(fixes)))
    return checks


def settings_of(text: str) -> dict[str, str]:
    """`statement_timeout=5s, lock_timeout=2s` (pg_db_role_setting.setconfig joined) as a mapping."""
    return {kv.split("=", 1)[0]: kv.split("=", 1)[1] for kv in text.split(", ") if "=" in kv}


def _identity(conn: Conn) -> list[Check]:
    """Whether a worker login is held to its own calls, and what weakens that binding."""
    checks: list[Check] = []
    rls = run_one(conn, "meta/doctor_row_security")
    if rls is None:
        return checks
    if not rls["enabled"]:
        checks.append(Check("row security", "fail",
                            "row level security is off on tool_jobs: a worker login can write any call",
                            "ALTER TABLE tool_jobs ENABLE ROW LEVEL SECURITY;"))
    elif rls["worker_role_exists"] and WORKER_POLICY not in rls["policies"]:
        checks.append(Check("row security", "fail", f"policy {WORKER_POLICY} is missing: worker logins "
                            "can write no call at all", "re-create the schema (migration 0005)"))
    else:
        checks.append(Check("row security", "ok",
                            "a worker login owns calls only as <login> or <login>:<name>"))
    for r in run(conn, "meta/doctor_worker_logins"):
        login = r["login"]
        problems, fixes = [], []
        also = [g for g, flag in (("leasectl_operator", r["also_operator"]),
                                  ("leasectl_supervisor", r["also_supervisor"])) if flag]
        if also:
            problems.append(f"also a member of {' and '.join(also)}: its worker identity cannot be bound "
                            "(those rights let it write calls it does not own, and its writes cannot be "
                            "told from an operator's or the control plane's)")
            fixes.append(f"REVOKE {', '.join(also)} FROM {login}; and give that role a login of its own")
        if r["unbound"]:
            problems.append("row level security does not apply to it (BYPASSRLS or the tables' owner): "
                            "it may write any call under any worker id")
            fixes.append(f"ALTER ROLE {login} NOBYPASSRLS; or run workers under a login of their own")
        if r["ambiguous_name"]:
            problems.append("its name contains ':', so its worker ids can be confused with another "
                            "login's `<login>:<name>` ids")
            fixes.append("name worker login roles without ':'")
        if problems:
            checks.append(Check(f"worker login {login}", "warn", "; ".join(problems), "\n".join(fixes)))
    try:
        shared = run(conn, "meta/doctor_shared_logins")
    except LeasectlError as exc:  # a huge history under a tight statement_timeout: say so, go on
        checks.append(Check("shared worker logins", "warn", f"could not check: {exc}"))
        return checks
    for r in shared:
        names = ", ".join(r["examples"]) + (", ..." if r["worker_names"] > len(r["examples"]) else "")
        checks.append(Check(
            f"shared worker login {r['login']}", "warn",
            f"login {r['login']} ran {r['worker_names']} workers in the last hour ({names}): it works, "
            "but the database cannot tell those workers apart -- any one of them can write the others' "
            "calls (finish, fail or renew them)",
            "give each worker its own login role: CREATE ROLE <name> LOGIN IN ROLE leasectl_worker; "
            "and run it with worker_id <name> (one login per worker keeps RLS meaningful)"))
    return checks


# each `problem` of queries/meta/doctor_tools.sql: its status, what is wrong and what to do
# ({sizing}: the tool's L, R, H and J; {minimum}: R x H + J)
TOOL_PROBLEMS: dict[str, tuple[Status, str, str]] = {
    "broken": ("fail", "lease too short: {sizing}",
               "make lease_seconds larger than {minimum} (docs/seeds.md §000.8: L > R x H + J)"),
    "auto_registered": ("warn", "registered automatically on first use: side-effect class unknown, "
                                "treated as mutating_unverifiable", "register it with its real class and lease sizing"),
    "tight": ("warn", "lease barely above the minimum: {sizing}",
              "a normal pause may cost a live worker its lease: add margin"),
}


def _tools(conn: Conn) -> list[Check]:
    checks = []
    for r in run(conn, "meta/doctor_tools"):
        sizing = (f"L={r['lease_seconds']}s, R={r['missed_heartbeats']} x H={r['heartbeat_seconds']}s"
                  f" + J={r['jitter_seconds']}s = {r['minimum']}s")
        status, detail, fix = TOOL_PROBLEMS.get(r["problem"], TOOL_PROBLEMS["tight"])
        checks.append(Check(f"tool {r['name']}", status, detail.format(sizing=sizing),
                            fix.format(minimum=r["minimum"])))
    return checks or [Check("tools", "ok", "every tool's lease is sized with margin")]


def _activity(conn: Conn) -> list[Check]:
    row = _the_row(conn, "meta/doctor_activity")
    checks = []
    if row["long_transactions"]:
        checks.append(Check("long transactions", "warn",
                            f"{row['long_transactions']} open for over a minute (oldest "
                            f"{row['oldest_transaction_seconds']}s): they hold back vacuum "
                            "and may hold row locks",
                            "find them in pg_stat_activity; set idle_in_transaction_session_timeout"))
    else:
        checks.append(Check("long transactions", "ok", "none open for over a minute"))
    blockers = run(conn, "meta/doctor_hot_blockers")
    if blockers:
        checks.append(Check("heartbeat updates", "warn",
                            "indexes cover the lease columns, so heartbeats cannot be HOT updates: "
                            + ", ".join(b["index_name"] for b in blockers),
                            "\n".join(f"DROP INDEX {b['index_name']};" for b in blockers)))
    else:
        checks.append(Check("heartbeat updates", "ok", "no index covers lease_until or heartbeat_at (HOT)"))
    return checks
