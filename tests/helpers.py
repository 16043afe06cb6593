"""Small helpers so tests read as the protocol: register, enqueue, claim, beat, complete."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from psycopg.types.json import Jsonb

from console.db.connect import Conn, run, run_one

FAST = {"lease_seconds": 1.0, "heartbeat_seconds": 0.25, "missed_heartbeats": 2,
        "jitter_seconds": 0.25}
# a lease no test outlives: a claimed call stays running, and its owner's, until the test acts
SLOW = {"lease_seconds": 60, "heartbeat_seconds": 5, "missed_heartbeats": 2, "jitter_seconds": 5}
# SLOW with a 30 s lease, still longer than any test: the sizing the tests of logins, races and renewals use
SLOW_30 = {"lease_seconds": 30, "heartbeat_seconds": 5, "missed_heartbeats": 2, "jitter_seconds": 5}
# quick leases and beats, so that deadlines of a second or two are many heartbeats long
QUICK = {"lease_seconds": 1.5, "heartbeat_seconds": 0.2, "missed_heartbeats": 2, "jitter_seconds": 0.3}

# A test module's tools: {name: (side_effect, register_tool's keywords)}. The fixture `conn`
# (tests/conftest.py) registers the TOOLS of the module it serves.
Tools = dict[str, tuple[str, dict[str, Any]]]


def register_tool(conn: Conn, name: str, side_effect: str = "read_only", *,
                  lease_seconds: float = 2.0, heartbeat_seconds: float = 0.5,
                  missed_heartbeats: int = 2, jitter_seconds: float = 0.5, max_attempts: int = 3,
                  stage_timeout_seconds: float | None = None, description: str | None = None,
                  min_time_left_seconds: float | None = None, service: str | None = None) -> dict:
    row = run_one(conn, "admin/register_tool", name=name, side_effect=side_effect,
                  lease_seconds=lease_seconds, heartbeat_seconds=heartbeat_seconds,
                  missed_heartbeats=missed_heartbeats, jitter_seconds=jitter_seconds,
                  max_attempts=max_attempts, stage_timeout_seconds=stage_timeout_seconds,
                  description=description,
                  # only when given: the SQL of a release before 0014 (tests/db/test_migrate.py) has neither
                  **{k: v for k, v in (("min_time_left_seconds", min_time_left_seconds), ("service", service))
                     if v is not None})
    assert row is not None
    return row


def register_tools(conn: Conn, tools: Tools) -> None:
    for name, (side_effect, settings) in tools.items():
        register_tool(conn, name, side_effect, **settings)


def enqueue(conn: Conn, tool: str, key: str | None = None, payload: Any = None, *,
            agent_id: str | None = None, session_id: str | None = None, deadline_at: Any = None,
            model: str | None = None, provider: str | None = None, priority: int | None = None) -> dict:
    row = run_one(conn, "worker/enqueue", tool=tool, idempotency_key=key or f"k-{uuid.uuid4().hex}",
                  payload=Jsonb(payload if payload is not None else {"n": 1}), agent_id=agent_id,
                  session_id=session_id, deadline_at=deadline_at, model=model, provider=provider,
                  # only when given: the SQL of a release before 0014 (tests/db/test_migrate.py) has none
                  **({"priority": priority} if priority is not None else {}))
    assert row is not None
    return row


def claim(conn: Conn, worker: str, tools: list[str] | None = None) -> dict | None:
    return run_one(conn, "worker/claim", worker_id=worker, tools=tools)


def claim_many(conn: Conn, worker: str, tools: list[str] | None, max_calls: int | None) -> list[dict]:
    return run(conn, "worker/claim_many", worker_id=worker, tools=tools, max_calls=max_calls)


def complete_many(conn: Conn, jobs: list[dict], worker: str, results: list[Any] | None = None,
                  tokens: list[int] | None = None) -> list[dict]:
    """complete_many.sql for `jobs` (their own tokens unless `tokens`): the rows it accepted."""
    return run(conn, "worker/complete_many", job_ids=[j["id"] for j in jobs], worker_id=worker,
               fencing_tokens=tokens if tokens is not None else [j["fencing_token"] for j in jobs],
               results=[Jsonb(r) for r in (results if results is not None else [{"ok": True}] * len(jobs))])


def running_and_queued(conn: Conn, running: int, queued: int, tool: str = "search") -> tuple[list[dict], list[dict]]:
    """`running` calls of `tool` (keys s:0, s:1, ...) each claimed by its own worker (w-0, w-1, ...),
    then `queued` more nobody claims (q:0, ...): the claims, and the enqueued rows of the queued ones."""
    claims = []
    for n in range(running):
        enqueue(conn, tool, f"s:{n}")
        got = claim(conn, f"w-{n}", [tool])
        assert got is not None
        claims.append(got)
    return claims, [enqueue(conn, tool, f"q:{n}") for n in range(queued)]


def heartbeat(conn: Conn, job: dict, worker: str, token: int | None = None) -> dict | None:
    return run_one(conn, "worker/heartbeat", job_id=job["id"], worker_id=worker,
                   fencing_token=job["fencing_token"] if token is None else token)


def complete(conn: Conn, job: dict, worker: str, result: Any = None,
             token: int | None = None) -> dict | None:
    return run_one(conn, "worker/complete", job_id=job["id"], worker_id=worker,
                   fencing_token=job["fencing_token"] if token is None else token,
                   result=Jsonb(result if result is not None else {"ok": True}))


def fail(conn: Conn, job: dict, worker: str, *, retryable: bool = True,
         token: int | None = None) -> dict | None:
    return run_one(conn, "worker/fail", job_id=job["id"], worker_id=worker,
                   fencing_token=job["fencing_token"] if token is None else token,
                   error=Jsonb({"message": "boom"}), retryable=retryable)


def start_side_effect(conn: Conn, job: dict, worker: str, request_id: str = "ext-1",
                      token: int | None = None) -> dict | None:
    return run_one(conn, "worker/start_side_effect", job_id=job["id"], worker_id=worker,
                   fencing_token=job["fencing_token"] if token is None else token,
                   external_request_id=request_id)


def report_unknown(conn: Conn, job: dict, worker: str, token: int | None = None) -> dict | None:
    return run_one(conn, "worker/report_outcome_unknown", job_id=job["id"], worker_id=worker,
                   fencing_token=job["fencing_token"] if token is None else token,
                   error=Jsonb({"message": "no answer"}))


def outcomes_unknown(conn: Conn, count: int, tool: str = "pay") -> list[dict]:
    """`count` calls of the unverifiable tool `tool` whose side effect started and whose outcome no
    worker knows: on triage, each waiting for an operator's approval."""
    register_tool(conn, tool, "mutating_unverifiable", **FAST)
    made = []
    for n in range(count):
        made.append(enqueue(conn, tool, f"{tool}:{n}"))
        c = claim(conn, f"w-{n}", [tool])
        assert c is not None
        start_side_effect(conn, c, f"w-{n}")
        report_unknown(conn, c, f"w-{n}")
    return made


def confirm_cancel(conn: Conn, job: dict, worker: str, token: int | None = None) -> dict | None:
    return run_one(conn, "worker/confirm_cancel", job_id=job["id"], worker_id=worker,
                   fencing_token=job["fencing_token"] if token is None else token)


def cancel(conn: Conn, job_id: Any, seen_state: str, seen_token: int, operator: str = "alice",
           reason: str = "test") -> dict | None:
    return run_one(conn, "operator/request_cancel", job_id=job_id, seen_state=seen_state,
                   seen_token=seen_token, operator=operator, reason=reason)


def mark_terminal(conn: Conn, job_id: Any, seen_state: str, seen_token: int, terminal_state: str,
                  *, force: bool = False, operator: str = "alice", reason: str = "test") -> dict | None:
    return run_one(conn, "operator/mark_terminal", job_id=job_id, seen_state=seen_state,
                   seen_token=seen_token, terminal_state=terminal_state, operator=operator,
                   reason=reason, force=force)


def approve(conn: Conn, job_id: Any, seen_state: str, seen_token: int, operator: str = "alice",
            reason: str = "checked with the bank") -> dict | None:
    return run_one(conn, "operator/approve_retry", job_id=job_id, seen_state=seen_state,
                   seen_token=seen_token, operator=operator, reason=reason)


def sweep(conn: Conn) -> list[dict]:
    return run(conn, "supervisor/sweep")


def job(conn: Conn, job_id: Any) -> dict:
    """Everything about a call, its payload and result included."""
    row = run_one(conn, "views/job", job_id=job_id)
    assert row is not None, f"no job {job_id}"
    document = run_one(conn, "views/job_document", job_id=job_id)
    return {**row, **(document or {})}


def events(conn: Conn, job_id: Any) -> list[dict]:
    return list(conn.execute("select * from job_events where job_id = %s order by id", (job_id,)))


def kinds(conn: Conn, job_id: Any) -> list[str]:
    return [e["kind"] for e in events(conn, job_id)]


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02,
               what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Step:
    """Run `fn` on its own connection in a thread; it is expected to block on a lock."""

    def __init__(self, db: Any, fn: Callable[[Conn], Any]) -> None:
        self.conn = db.connect()
        self.pid = self.conn.info.backend_pid
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,))

    def _run(self, fn: Callable[[Conn], Any]) -> None:
        try:
            self.result = fn(self.conn)
        except BaseException as exc:  # noqa: BLE001
            self.error = exc

    def start_and_wait_blocked(self, observer: Conn) -> Step:
        self._thread.start()
        wait_until(lambda: observer.execute(
            "select wait_event_type = 'Lock' as blocked from pg_stat_activity where pid = %s",
            (self.pid,)).fetchone()["blocked"], timeout=10, what=f"backend {self.pid} to block on a lock")
        return self

    def finish(self) -> Any:
        self._thread.join(timeout=15)
        assert not self._thread.is_alive()
        self.conn.close()
        if self.error:
            raise self.error
        return self.result


def expire_lease(conn: Conn, job_id: Any) -> None:
    """Wait until the database's clock is past the call's lease (no clock tricks)."""
    wait_until(lambda: conn.execute(
        "select lease_until < now() as gone from tool_jobs where id = %s", (job_id,)
    ).fetchone()["gone"], timeout=30, what="the lease to expire")


def tool_jobs_updates(conn: Conn, since: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """The row updates of tool_jobs the statistics have counted (since `since`, an earlier answer),
    and how many of them were HOT (no index entry written). A backend hands its counts over when it
    goes idle: `select pg_stat_force_next_flush()` on it makes that now."""
    row = conn.execute("select n_tup_upd, n_tup_hot_upd from pg_stat_user_tables "
                       "where relname = 'tool_jobs'").fetchone()
    return row["n_tup_upd"] - since[0], row["n_tup_hot_upd"] - since[1]


def record_event(conn: Conn, job: dict, kind: str, actor: str, token: int | None = None,
                 details: Any = None) -> dict | None:
    return run_one(conn, "worker/record_event", job_id=job["id"], kind=kind, actor=actor,
                   fencing_token=job["fencing_token"] if token is None else token,
                   details=Jsonb(details) if details is not None else None)


def as_login(db: Any, login: str) -> Conn:
    """A session of leasectl's own kind (timeouts, dict rows, autocommit) as another login role."""
    from psycopg.conninfo import make_conninfo

    from console.db.connect import connect

    return connect(make_conninfo(db.dsn, user=login))


def ensure_login(admin: Any, login: str, group: str | None = None, *, bypassrls: bool = False) -> None:
    """Create a login role once, whichever parallel test process gets there first (`bypassrls`: one
    that row level security does not stop, when this call creates it)."""
    import psycopg

    try:
        admin.execute(f"create role {login} login" + (" bypassrls" if bypassrls else ""))
    except (psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
        pass
    if group:
        for attempt in range(5):
            try:
                admin.execute(f"grant {group} to {login}")
                return
            except psycopg.errors.UniqueViolation:
                # Roles are cluster-wide: another test process granted the same membership between
                # our check and our insert into pg_auth_members, which is what we wanted anyway.
                return
            except psycopg.errors.InternalError:  # "tuple concurrently updated": granted at this moment
                if attempt == 4:
                    raise
                time.sleep(0.05)


# ---------------------------------------------------------------------------- fleet


def register_agent(conn: Conn, agent_id: str, parent_id: str | None = None, kind: str = "worker") -> dict | None:
    return run_one(conn, "agent/register", agent_id=agent_id, parent_id=parent_id, kind=kind)


def register_tree(conn: Conn, tree: dict[str, str | None]) -> None:
    """{agent: parent} in an order where parents come first."""
    for agent_id, parent_id in tree.items():
        assert register_agent(conn, agent_id, parent_id, kind=agent_id.split("-")[0]) is not None


def give_grant(conn: Conn, agent_id: str, kind: str = "credential", resource: str = "vault:db",
               issued_by: str = "control-plane", expires_in: float = 3600) -> dict | None:
    return run_one(conn, "agent/grant", agent_id=agent_id, kind=kind, resource=resource, issued_by=issued_by,
                   expires_at=conn.execute("select now() + make_interval(secs => %s) as t",
                                           (expires_in,)).fetchone()["t"])


def revoke_grant(conn: Conn, grant_id: Any, revoker: str) -> dict | None:
    return run_one(conn, "supervisor/revoke_grant", grant_id=grant_id, revoker=revoker)


def request_shutdown(conn: Conn, root: str, mode: str = "drain", window: float = 60,
                     operator: str = "alice", reason: str = "maintenance") -> dict | None:
    return run_one(conn, "operator/request_shutdown", root_agent_id=root, mode=mode, requested_by=operator,
                   reason=reason, window_seconds=window)


def try_enqueue(conn: Conn, tool: str, agent_id: str) -> dict | None:
    """enqueue.sql for an agent that may be shutting down (zero rows = refused)."""
    return run_one(conn, "worker/enqueue", tool=tool, idempotency_key=f"k-{uuid.uuid4().hex}",
                   payload=Jsonb({"n": 1}), agent_id=agent_id, session_id=None, deadline_at=None,
                   model=None, provider=None)


# ---------------------------------------------------------------------------- the command line


def cli_invoker(default_dsn: str, user: str) -> Callable[..., Any]:
    """`leasectl ARGS --dsn DSN` run in this process, as the OS user `user` (the operator name the
    commands default to); a traceback in what it printed fails the test, whatever its exit code."""
    from typer.testing import CliRunner

    from console.operator.cli import app

    runner = CliRunner()

    def invoke(*args: str, dsn: str | None = None, input: str | None = None) -> Any:
        result = runner.invoke(app, [*args, "--dsn", dsn or default_dsn], input=input, env={"USER": user})
        assert "Traceback" not in result.output, result.output
        return result

    return invoke


def js(result: Any) -> Any:
    """What a command that succeeded printed, as JSON."""
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def refusal(conn: Conn, statement: str, params: tuple = ()) -> tuple[str | None, str | None]:
    """The SQLSTATE and the constraint named by the database's refusal of `statement` ((None, None):
    it went through)."""
    import psycopg

    try:
        conn.execute(statement, params)
    except psycopg.Error as exc:
        return exc.sqlstate, exc.diag.constraint_name
    return None, None


@contextmanager
def demo_fleet(db: Any, *, seed: int, tempo: float) -> Iterator[Any]:
    """The demo's simulated fleet (console/demo/fleet.py) working on the test database, quietly;
    its workers, supervisor and situations stopped on the way out."""
    from console.demo.fleet import Fleet

    fleet = Fleet(db.dsn, seed=seed, tempo=tempo, say=lambda _text: None)
    with db.connect() as conn:
        fleet.prepare(conn)
    fleet.start()
    try:
        yield fleet
    finally:
        fleet.shutdown()
