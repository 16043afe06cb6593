"""A simulated fleet: reference workers (threads) doing real lease work against fenced
receivers, a steady flow of calls, and the troubles an on-call engineer meets, again and again.

Situations travel in the calls' payloads (`"situation": ...`), so whichever worker claims such
a call plays it out; with the same seed the same situations come in the same order. Every
duration is multiplied by `tempo` (tool leases included), so tests can replay a minute quickly.
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from psycopg.types.json import Jsonb

from console.db import actions
from console.db.connect import Conn, connect, run, run_one
from console.demo.tools import DEMO_TOOLS
from console.shared.config import SessionLimits
from console.shared.errors import LeasectlError, RowLocked
from console.worker import CallContext, ToolFailed, ToolNoAnswer, Worker
from console.worker.receiver import FencedReceiver, NoAnswer, StaleFence

log = logging.getLogger("leasectl.demo")

# when each situation is set off, in seconds from the start of a cycle (x tempo)
SITUATIONS: list[tuple[float, str]] = [
    (2, "worker_dies"),        # heartbeats stop mid-call; the lease expires; another worker reclaims
    (3, "browser_stuck"),      # heartbeats, but sits past its stage timeout
    (5, "partition"),          # cut off from the database; wakes after its lease was taken: a zombie
    (7, "payment_timeout"),    # the answer is lost after the request was sent: outcome unknown
    (9, "cancel_race"),        # a cancel request and the result cross: completed despite the cancel
    (11, "cancel_unheard"),    # a worker that never hears its cancel, and keeps renewing its lease
    (13, "deadline"),          # the chain's deadline passes before anyone gets to it
    (15, "attempts"),          # fails on every attempt until none is left
    (17, "deadline_mid_stage"),  # a report chain whose deadline runs out while its second stage runs
    (24, "erp_batch"),         # a slow ERP batch keeps the ERP worker busy while a lease lies expired
    (26, "row_lock"),          # a long transaction holds a row lock; an operator action meets lock_timeout
    (28, "orphan"),            # a research agent crashes; its scraper runs on: orphaned, an abort proposed
    (32, "rollout"),           # the orchestrator rolls the planner tree to its next generation (once)
]
CYCLE_SECONDS = 120.0
# how long an ancestor is silent before its running children are orphans (x tempo; migration 0018's default)
ORPHAN_AFTER_SECONDS = 60.0
# a report's chain has this long (x tempo) from its first stage to its last
REPORT_DEADLINE = 240.0

# The agent tree (docs/seeds.md §003): a planner delegates to retrieval, code and review agents; the code
# agent runs a sandbox that holds a database credential. The sandbox is the child that never
# confirms it stopped: drain or abort the planner's subtree and the record lists it unaccounted.
TREE: list[tuple[str, str | None]] = [("planner", None), ("retrieval", "planner"), ("code", "planner"),
                                      ("sandbox", "code"), ("review", "planner")]
SILENT = "sandbox"
# the orphan situation (docs/seeds.md §003's core failure): a root that crashes and a child that runs on
ORPHAN_TREE: list[tuple[str, str | None]] = [("research", None), ("scraper", "research")]
ROOTS = ["billing-agent", "ops-agent"]  # outside the tree: payments and operations
# (grantee, kind, resource, issuer, lifetime in seconds x tempo): the rate-limit token expires
# early on, so a record lists it as expired rather than revoked
GRANTS: list[tuple[str, str, str, str, float]] = [
    ("sandbox", "credential", "vault:prod-db/readonly", "code", 3600),
    ("review", "file_lock", "repo:main/CHANGELOG.md", "planner", 1800),
    ("retrieval", "rate_limit_token", "serp-api:60rpm", "planner", 45),
    ("code", "queue_reservation", "queue:builds/slot-2", "planner", 1800),
]
MODELS = [("gpt-5.1", "openai"), ("claude-sonnet-4.6", "anthropic"), ("gemini-3-pro", "google")]


class WorkerDied(BaseException):
    """A simulated worker dies in its handler (a killed pod). A BaseException, so that nothing of
    the reference worker takes it for a tool's failure: no result, no failure, no cancel is
    written; it leaves Worker.run through its `finally`, which closes the worker's connections,
    and the thread ends. (Parking the thread instead, as the demo once did, kept both of its
    connections open for the demo's life: two per death, until the server had none left.)"""


@dataclass
class Receivers:
    search: FencedReceiver = field(default_factory=lambda: FencedReceiver("search-api", verifiable=True))
    browser: FencedReceiver = field(default_factory=lambda: FencedReceiver("browser-farm", verifiable=True))
    erp: FencedReceiver = field(default_factory=lambda: FencedReceiver("erp", verifiable=True))
    psp: FencedReceiver = field(default_factory=lambda: FencedReceiver("psp", verifiable=False))
    exports: FencedReceiver = field(default_factory=lambda: FencedReceiver("exports", verifiable=True))


class Fleet:
    def __init__(self, dsn: str, *, seed: int = 7, tempo: float = 1.0, rate: float = 1.0,
                 say: Callable[[str], None] | None = None) -> None:
        self.dsn = dsn
        self.seed = seed
        self.tempo = tempo
        self.rate = rate  # new calls per second (before tempo)
        self.say = say or log.info
        self.rng = random.Random(seed)
        self.receivers = Receivers()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.workers: list[Worker] = []
        self._dead = 0
        self._lock = threading.Lock()
        self._counter = 0
        self.last_keys: dict[str, str] = {}
        self.started = time.monotonic()
        self.agents: dict[str, str] = {}  # role in the tree (or a root's name) -> this generation's agent id
        self.retiring: dict[str, str] = {}  # a rolled-out generation (role -> agent id) still shutting down
        self.crashed: set[str] = set()  # agents that stopped heartbeating without a word (the orphan situation)
        self._once: set[str] = set()  # situations that happen in the first cycle only
        self._refused: set[str] = set()

    # ------------------------------------------------------------------ setup
    def prepare(self, conn: Conn) -> None:
        """Register the demo's tools with their lease sizing scaled by tempo, and the agents; the
        silence that makes an orphan scales with tempo too."""
        for tool in DEMO_TOOLS:
            scaled = dict(tool)
            for key in ("lease_seconds", "heartbeat_seconds", "jitter_seconds", "stage_timeout_seconds",
                        "min_time_left_seconds"):
                scaled[key] = round(tool[key] * self.tempo, 3)
            run_one(conn, "admin/register_tool", **scaled)
        run_one(conn, "admin/set_setting", name="fleet.orphan_after_seconds",
                value=Jsonb(round(ORPHAN_AFTER_SECONDS * self.tempo, 3)))
        self.register_agents(conn)

    def register_agents(self, conn: Conn) -> None:
        """This run's agents. A tree shut down earlier (in this run or a previous one) stays as it is,
        with its record; the orchestrator starts a new generation under new names."""
        states = {r["id"]: r["state"] for r in run(conn, "views/fleet")}
        generation = 1
        while states.get(f"planner-{generation}", "running") != "running":
            generation += 1
        agents = {role: f"{role}-{generation}" for role, _ in TREE}
        for root in ROOTS:
            n, name = 1, root
            while states.get(name, "running") != "running":
                n += 1
                name = f"{root}-{n}"
            agents[root] = name
        for role, parent in TREE:
            run_one(conn, "agent/register", agent_id=agents[role], parent_id=agents[parent] if parent else None,
                    kind=role)
        for root in ROOTS:
            run_one(conn, "agent/register", agent_id=agents[root], parent_id=None, kind=root.split("-")[0])
        fresh = states.get(agents["planner"]) is None
        if fresh:
            now = run_one(conn, "views/db_info")
            assert now is not None
            for grantee, kind, resource, issuer, lifetime in GRANTS:
                run_one(conn, "agent/grant", agent_id=agents[grantee], kind=kind, resource=resource,
                        issued_by=agents[issuer], expires_at=now["db_now"] + timedelta(seconds=self.seconds(lifetime)))
            if generation > 1:
                self.say(f"the orchestrator started a new planner tree: {agents['planner']}")
        with self._lock:
            self.agents = agents
            self._refused.clear()

    def seconds(self, value: float) -> float:
        return value * self.tempo

    # ------------------------------------------------------------------ workers
    def start(self) -> None:
        pools = [
            ("w-search-1", ["web_search"]), ("w-search-2", ["web_search"]), ("w-search-3", ["web_search"]),
            ("w-search-4", ["web_search"]),
            ("w-browser-1", ["browser_session"]), ("w-browser-2", ["browser_session"]),
            ("w-erp-1", ["erp_update_order"]), ("w-erp-2", ["erp_update_order"]), ("w-pay-1", ["payment_capture"]),
            ("w-report-1", ["report_export"]), ("w-report-2", ["report_export"]),
        ]
        for name, tools in pools:
            self._start_worker(name, tools)
        for target in (self._feed, self._situations, self._supervise, self._agent_lives):
            thread = threading.Thread(target=target, daemon=True, name=target.__name__)
            thread.start()
            self.threads.append(thread)

    def _start_worker(self, name: str, tools: list[str]) -> None:
        worker = Worker(self.dsn, name, self._handler, tools=tools, poll_interval=0.25)

        def live() -> None:
            try:
                worker.run(self.stop)
            except WorkerDied:
                pass  # Worker.run closed its connections on the way out, as a killed process's end

        thread = threading.Thread(target=live, daemon=True, name=name)
        with self._lock:
            self.workers.append(worker)
        thread.start()
        self.threads.append(thread)

    def shutdown(self, timeout: float = 5.0) -> None:
        self.stop.set()
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(timeout=max(deadline - time.monotonic(), 0.1))

    # ------------------------------------------------------------------ the calls
    def _key(self, prefix: str) -> str:
        with self._lock:
            self._counter += 1
            key = f"{prefix}:{self.seed}-{int(self.started)}-{self._counter}"
            self.last_keys[prefix] = key
            return key

    def _agent_for(self, tool: str) -> str:
        with self._lock:
            agents = dict(self.agents)
        if tool == "payment_capture":
            return agents["billing-agent"]
        if tool in ("erp_update_order", "report_export"):
            return self.rng.choice([agents["code"], agents["ops-agent"]])
        if tool == "browser_session":
            return self.rng.choice([agents["sandbox"], agents["review"]])
        return self.rng.choice([agents["planner"], agents["retrieval"], agents["retrieval"], agents["review"]])

    def enqueue(self, conn: Conn, tool: str, payload: dict[str, Any], *, key_prefix: str,
                deadline_in: float | None = None, agent: str | None = None, priority: int = 0) -> str | None:
        """A new call for an agent; None when refused because that agent's subtree is shutting down."""
        agent = agent or self._agent_for(tool)
        model, provider = self.rng.choice(MODELS)
        key = self._key(key_prefix)
        deadline = None
        if deadline_in is not None:
            row = run_one(conn, "views/db_info")
            assert row is not None
            deadline = row["db_now"] + timedelta(seconds=self.seconds(deadline_in))
        made = run_one(conn, "worker/enqueue", tool=tool, idempotency_key=key, payload=Jsonb(payload),
                       agent_id=agent, session_id=f"sess-{self.rng.randrange(1000, 9999)}", deadline_at=deadline,
                       model=model, provider=provider, priority=priority,
                       # as an agent platform's trace would be (the detail shows it; a context's
                       # trace_url links it): derived from the key, so the demo's draws are unchanged
                       trace_id=hashlib.sha256(key.encode()).hexdigest()[:32])
        if made is None:
            if agent not in self._refused:
                self._refused.add(agent)
                self.say(f"{agent} is shutting down: its new calls are refused")
            return None
        return key

    def _feed(self) -> None:
        """The steady flow: mostly quick searches, some ERP updates, payments, browsing, reports."""
        # sized below each pool's capacity, so queues stay short and troubles stand out
        choices = [("web_search", 62), ("erp_update_order", 12), ("payment_capture", 10),
                   ("browser_session", 5), ("report_export", 3)]
        tools = [t for t, _ in choices]
        weights = [w for _, w in choices]
        report = 0
        while not self.stop.is_set():
            try:
                with connect(self.dsn, application_name="leasectl-demo-feed") as conn:
                    while not self.stop.is_set():
                        tool = self.rng.choices(tools, weights)[0]
                        if tool == "report_export":
                            # a chain: stage 1 enqueues stage 2 as it finishes (_export)
                            report += 1
                            self.enqueue(conn, tool, {"report": report, "stage": 1, "stages": 2},
                                         key_prefix=f"report:{report}:stage:1", deadline_in=REPORT_DEADLINE)
                        else:
                            self.enqueue(conn, tool, self._payload(tool), key_prefix=tool.split("_")[0])
                        self.stop.wait(self.rng.uniform(0.5, 1.5) / self.rate * self.tempo)
            except LeasectlError as exc:
                log.warning("demo feed: %s", exc)
                self.stop.wait(1.0)

    def _payload(self, tool: str) -> dict[str, Any]:
        r = self.rng
        if tool == "web_search":
            return {"q": r.choice(["postgres fencing tokens", "lease renewal jitter", "idempotency keys",
                                   "SKIP LOCKED queue", "hot updates fillfactor"])}
        if tool == "erp_update_order":
            return {"order": f"A-{r.randrange(1000, 1999)}", "status": r.choice(["picked", "shipped", "held"])}
        if tool == "payment_capture":
            return {"invoice": f"inv-{r.randrange(100, 999)}", "amount": f"{r.randrange(5, 500)}.00",
                    "currency": "EUR"}
        return {"url": r.choice(["https://shop.example/orders", "https://crm.example/leads"]),
                "goal": "collect the table"}

    # ------------------------------------------------------------------ situations
    def _situations(self) -> None:
        cycle = 0
        while not self.stop.is_set():
            start = time.monotonic()
            for offset, name in SITUATIONS:
                if self.stop.wait(max(start + self.seconds(offset) - time.monotonic(), 0)):
                    return
                if name in self._once:  # a first-cycle-only situation, already told
                    continue
                try:
                    self.say(f"situation: {name.replace('_', ' ')} (cycle {cycle + 1})")
                    getattr(self, f"_set_off_{name}")()
                except LeasectlError as exc:
                    log.warning("demo situation %s: %s", name, exc)
            cycle += 1
            if self.stop.wait(max(start + self.seconds(CYCLE_SECONDS) - time.monotonic(), 0)):
                return

    def _situation_agent(self) -> str:
        """Situations happen to the ops agent (outside the tree): draining the tree from the
        console must not stop the troubles the other screens exist for."""
        with self._lock:
            return self.agents["ops-agent"]

    def _with_conn(self, fn: Callable[[Conn], Any]) -> Any:
        with connect(self.dsn, application_name="leasectl-demo") as conn:
            return fn(conn)

    def _set_off_worker_dies(self) -> None:
        self._with_conn(lambda c: self.enqueue(c, "erp_update_order",
                                               {"order": "A-1050", "status": "cancel-line", "situation": "die"},
                                               key_prefix="order:A-1050:cancel-line", agent=self._situation_agent()))

    def _set_off_browser_stuck(self) -> None:
        self._with_conn(lambda c: self.enqueue(c, "browser_session",
                                               {"url": "https://shop.example/checkout", "situation": "stuck"},
                                               key_prefix="browse:checkout", agent=self._situation_agent()))

    def _set_off_partition(self) -> None:
        self._with_conn(lambda c: self.enqueue(c, "web_search", {"q": "vendor status", "situation": "partition"},
                                               key_prefix="search:vendor-status", agent=self._situation_agent()))

    def _set_off_payment_timeout(self) -> None:
        self._with_conn(lambda c: self.enqueue(c, "payment_capture",
                                               {"invoice": "inv-7", "amount": "129.00", "currency": "EUR",
                                                "situation": "no_answer"},
                                               key_prefix="payment:inv-7:capture"))

    def _set_off_cancel_race(self) -> None:
        key = self._with_conn(lambda c: self.enqueue(c, "web_search", {"q": "competitor prices",
                                                                       "situation": "slow_result"},
                                                     key_prefix="search:competitor-prices",
                                                     agent=self._situation_agent()))
        if key is not None:
            self._background(self._cancel_when_running, key, 1.5, "user closed the chat")

    def _set_off_cancel_unheard(self) -> None:
        key = self._with_conn(lambda c: self.enqueue(c, "web_search", {"q": "full crawl", "situation": "deaf"},
                                                     key_prefix="search:full-crawl", agent=self._situation_agent()))
        if key is not None:
            self._background(self._cancel_when_running, key, 1.0, "taking too long")

    def _set_off_deadline(self) -> None:
        self._with_conn(lambda c: self.enqueue(c, "report_export", {"report": "quarterly", "stage": 1},
                                               key_prefix="report:quarterly:stage:1", deadline_in=3,
                                               agent=self._situation_agent()))

    def _set_off_deadline_mid_stage(self) -> None:
        """The night's trouble: a three-stage report under a 60 s deadline, urgent (priority 5, which its
        stages inherit, so each is claimed ahead of the day's backlog); stage 1 is quick, stage 2
        meets an export service slowed to a crawl, and the chain's deadline runs out while it runs.
        Its lease ends with the deadline (no lease outlives it), the worker writes nothing after it,
        the sweep ends the call, and stage 3 never starts: the Chains screen (8) and the call's detail
        show where the time went."""
        self._with_conn(lambda c: self.enqueue(c, "report_export",
                                               {"report": "nightly", "stage": 1, "stages": 3, "slow_stage": 2},
                                               key_prefix="report:nightly:stage:1", deadline_in=60,
                                               agent=self._situation_agent(), priority=5))

    def _set_off_attempts(self) -> None:
        self._with_conn(lambda c: self.enqueue(c, "web_search", {"q": "flaky vendor", "situation": "always_503"},
                                               key_prefix="search:flaky-vendor", agent=self._situation_agent()))

    def _set_off_erp_batch(self) -> None:
        self._with_conn(lambda c: self.enqueue(c, "erp_update_order", {"order": "batch-77", "situation": "slow",
                                                                       "status": "reprice"},
                                               key_prefix="order:batch-77", agent=self._situation_agent()))

    def _set_off_row_lock(self) -> None:
        self._background(self._hold_lock_and_try)

    def _first_cycle_only(self, name: str) -> bool:
        with self._lock:
            if name in self._once:
                return False
            self._once.add(name)
            return True

    def _set_off_orphan(self) -> None:
        """A research agent crashes (no more heartbeats, no word) while its scraper runs on, holding a
        credential: after the silence the supervisor calls the scraper orphaned and proposes an
        abort of its subtree. Nothing stops it until someone accepts (4 Fleet, `a`)."""
        if not self._first_cycle_only("orphan"):
            return

        def start(conn: Conn) -> None:
            known = {r["id"] for r in run(conn, "views/fleet")}
            n = 1
            while f"research-{n}" in known:  # a previous run's, on the same database
                n += 1
            names = {role: f"{role}-{n}" for role, _ in ORPHAN_TREE}
            for role, parent in ORPHAN_TREE:
                run_one(conn, "agent/register", agent_id=names[role], parent_id=names[parent] if parent else None,
                        kind=role)
            now = run_one(conn, "views/db_info")
            assert now is not None
            run_one(conn, "agent/grant", agent_id=names["scraper"], kind="credential", resource="news-api:key-7",
                    issued_by=names["research"], expires_at=now["db_now"] + timedelta(seconds=self.seconds(3600)))
            with self._lock:
                self.crashed.add(names["research"])
                self.agents["scraper"] = names["scraper"]
            self.say(f"{names['research']} crashed without a word; {names['scraper']} runs on under it")

        self._with_conn(start)

    def _set_off_rollout(self) -> None:
        """Drain, reconcile, restart (docs/seeds.md §003's upgrade path): the orchestrator registers the
        planner tree's next generation (each agent `replaces` its predecessor), sends new work there,
        and drains the old tree naming the new planner as its replacement: the supervisor moves the
        old tree's queued calls to the agents of the same kind in the new one, and the record lists
        them. The old sandbox goes silent, as ever: the record says it never confirmed."""
        if not self._first_cycle_only("rollout"):
            return
        self._background(self._roll_out)

    def _roll_out(self) -> None:
        with self._lock:
            old = {role: self.agents[role] for role, _ in TREE}
        generation = int(old["planner"].rsplit("-", 1)[1]) + 1
        new = {role: f"{role}-{generation}" for role, _ in TREE}
        with connect(self.dsn, application_name="leasectl-demo-orchestrator") as conn:
            states = {r["id"]: r["state"] for r in run(conn, "views/fleet")}
            if states.get(old["planner"]) != "running" or new["planner"] in states:
                # someone shut the tree down from the console first: roll out in a later cycle
                with self._lock:
                    self._once.discard("rollout")
                self.say(f"the orchestrator postpones its rollout: {old['planner']} is "
                         f"{states.get(old['planner'], 'gone')}")
                return
            for role, parent in TREE:
                run_one(conn, "agent/register", agent_id=new[role], parent_id=new[parent] if parent else None,
                        kind=role, replaces=old[role])
            now = run_one(conn, "views/db_info")
            assert now is not None
            for grantee, kind, resource, issuer, lifetime in GRANTS:
                run_one(conn, "agent/grant", agent_id=new[grantee], kind=kind, resource=resource,
                        issued_by=new[issuer], expires_at=now["db_now"] + timedelta(seconds=self.seconds(lifetime)))
            # work the old tree accepted and has not started: a batch of lookups and an export
            for n in range(4):
                self.enqueue(conn, "web_search", {"q": f"rollout backlog {n}"}, key_prefix="search:backlog",
                             agent=old["retrieval"])
            self.enqueue(conn, "report_export", {"report": "backlog", "stage": 1}, key_prefix="report:backlog:stage:1",
                         agent=old["code"])
            with self._lock:
                self.retiring = dict(old)
                self.agents.update(new)
            self.say(f"the orchestrator started {new['planner']} (generation {generation}) and drains "
                     f"{old['planner']}: its queued calls move to the new generation")
            actions.request_shutdown(conn, old["planner"], mode="drain", operator="orchestrator",
                                     reason=f"roll out {new['planner']}: new model version",
                                     window_seconds=self.seconds(60), replacement=new["planner"])

    def _background(self, target: Callable[..., None], *args: Any) -> None:
        """A helper thread of a situation. The database may go away under it (a demo of a dead
        database, a Ctrl-C): it ends with a line in the log, never a traceback over the console."""
        def guarded() -> None:
            try:
                target(*args)
            except Exception as exc:  # noqa: BLE001 - psycopg's or ours: the situation just ends
                log.warning("demo %s ended: %s", target.__name__, exc)

        threading.Thread(target=guarded, daemon=True, name=target.__name__).start()

    def _cancel_when_running(self, key: str, after: float, reason: str) -> None:
        """The operator bot cancels a call once it runs, guarded by what it read."""
        with connect(self.dsn, application_name="leasectl-demo-operator") as conn:
            deadline = time.monotonic() + self.seconds(60)
            while not self.stop.is_set() and time.monotonic() < deadline:
                row = run_one(conn, "demo/running_call", idempotency_key=key)
                if row and row["state"] == "running":
                    self.stop.wait(self.seconds(after))
                    actions.cancel(conn, row["id"], seen_state="running", seen_token=row["fencing_token"],
                                   operator="ops-bot", reason=reason)
                    return
                self.stop.wait(0.1)

    def _hold_lock_and_try(self) -> None:
        """A long transaction locks the unknown-outcome payment's row; an operator meets it."""
        key = self.last_keys.get("payment:inv-7:capture")
        if key is None:
            return
        forgotten = SessionLimits(statement_timeout_ms=0, lock_timeout_ms=0, idle_in_transaction_ms=0)
        with connect(self.dsn, application_name="demo-long-transaction", autocommit=False,
                     limits=forgotten) as holder:
            target = run_one(holder, "demo/running_call", idempotency_key=key)
            holder.rollback()
            if target is None or target["state"] != "outcome_unknown":
                return
            run_one(holder, "demo/hold_row_lock", job_id=target["id"])  # the transaction stays open
            self.say(f"a long transaction holds the row of call {str(target['id'])[:8]}")
            try:
                with connect(self.dsn, application_name="leasectl-demo-operator") as op:
                    self.stop.wait(self.seconds(2))
                    try:
                        actions.mark_terminal(op, target["id"], seen_state="outcome_unknown",
                                              seen_token=target["fencing_token"], terminal_state="failed",
                                              operator="ops-bot", reason="PSP says declined")
                    except RowLocked:
                        self.say("the operator's action met lock_timeout (journaled)")
                self.stop.wait(self.seconds(45))
            finally:
                holder.rollback()

    # ------------------------------------------------------------------ the control plane and the agents
    def _supervise(self) -> None:
        """`leasectl supervise` in a thread: the expired-lease sweep and every shutdown requested
        from the console (drain, abort, reconciliation record)."""
        from console.control.supervisor import Supervisor, TickReport

        def tell(report: TickReport) -> None:
            for line in report.notes + report.failures:
                self.say(line)

        Supervisor(self.dsn, supervisor_id="supervisor@demo", interval=1.0, sweep_interval=self.seconds(30),
                   on_report=tell).run(self.stop)

    def _agent_lives(self) -> None:
        """Each agent heartbeats and so learns when its subtree is shutting down; it then takes no
        new work, and confirms it stopped once none of its calls is in flight. Except the sandbox:
        it goes silent (a crashed container nobody restarted) and never confirms."""
        silent: set[str] = set()
        while not self.stop.wait(self.seconds(2)):
            try:
                with connect(self.dsn, application_name="leasectl-demo-agents") as conn:
                    fleet = {r["id"]: r for r in run(conn, "views/fleet")}
                    with self._lock:
                        mine = dict(self.agents)
                        lives = [*mine.items(), *self.retiring.items()]
                        crashed = set(self.crashed)
                    for role, agent in lives:
                        if agent in silent or agent in crashed or fleet.get(agent, {}).get("state") == "terminated":
                            continue
                        beat = run_one(conn, "agent/heartbeat", agent_id=agent)
                        if beat is None or not beat["shutting_down"]:
                            continue
                        if role == SILENT:
                            silent.add(agent)
                            self.say(f"{agent} went silent while its subtree shuts down: it will never confirm")
                            continue
                        row = fleet.get(agent)
                        in_flight = row["running_calls"] + row["queued_calls"] if row else 0
                        if in_flight == 0 and row is not None and row["terminated_confirmed_at"] is None:
                            run_one(conn, "agent/confirm_terminated", agent_id=agent)
                            self.say(f"{agent} confirmed it stopped")
                    # a tree (or a root) shut down for good: the orchestrator starts a new generation
                    if any(fleet.get(mine[r], {}).get("state") == "terminated" for r in ("planner", *ROOTS)):
                        self.register_agents(conn)
            except LeasectlError as exc:
                log.warning("demo agents: %s", exc)

    # ------------------------------------------------------------------ the tools
    def _handler(self, ctx: CallContext) -> Any:
        situation = (ctx.payload or {}).get("situation")
        if ctx.call.attempt > 1 and situation != "always_503":
            situation = None  # the trouble befalls the first owner; a retry is an ordinary call again
        tool = ctx.call.tool
        if situation == "die":
            return self._die(ctx)
        if situation == "partition":
            return self._partitioned_search(ctx)
        if tool == "web_search":
            return self._search(ctx, situation)
        if tool == "browser_session":
            return self._browse(ctx, situation)
        if tool == "erp_update_order":
            return self._erp(ctx, situation)
        if tool == "payment_capture":
            return self._pay(ctx, situation)
        return self._export(ctx)

    def _search(self, ctx: CallContext, situation: str | None) -> Any:
        if situation == "always_503":
            raise ToolFailed("search vendor answered HTTP 503", retryable=True)
        request = f"req-{uuid.uuid4().hex[:8]}"
        ctx.record_event("tool_request_started", {"external_request_id": request})
        reply = self.receivers.search.submit(object_id=f"q:{ctx.payload.get('q')}", idempotency_key=ctx.idempotency_key,
                                             fence=ctx.fencing_token, operation="search", sender=ctx.worker_id,
                                             execution=str(ctx.call.id), traceparent=ctx.traceparent)
        if situation == "slow_result":
            time.sleep(self.seconds(4))  # a tool that cannot be interrupted: the cancel arrives meanwhile
        elif situation == "deaf":
            # long enough to be seen unheard, short enough to end within its cycle
            end = time.monotonic() + self.seconds(80)
            while time.monotonic() < end and not ctx.lease_lost:
                time.sleep(0.2)  # never looks at ctx.cancel_requested: the cancel goes unheard
        else:
            ctx.sleep(self.rng.uniform(0.3, 2.0) * self.tempo)
        return {"hits": 10, "confirmation": reply.result["confirmation"]}

    def _browse(self, ctx: CallContext, situation: str | None) -> Any:
        request = f"br-{uuid.uuid4().hex[:8]}"
        ctx.record_event("tool_request_started", {"external_request_id": request})
        self.receivers.browser.submit(object_id=request, idempotency_key=ctx.idempotency_key,
                                      fence=ctx.fencing_token, operation="open", sender=ctx.worker_id,
                                      execution=str(ctx.call.id), traceparent=ctx.traceparent)
        # stuck on a modal: heartbeats go on, progress does not (stage timeout 40 s)
        ctx.sleep(self.seconds(95 if situation == "stuck" else self.rng.uniform(4, 12)))
        return {"rows": self.rng.randrange(10, 200)}

    @staticmethod
    def _check_first(ctx: CallContext, receiver: FencedReceiver, object_id: str) -> dict[str, Any] | None:
        """A verifiable call that carries an earlier request (a previous owner sent it, then lost
        its lease or its answer): ask the service what became of it before sending it again, and
        record the answer (worker/record_check.sql, journaled as side_effect_checked). Returns what
        the service did when it did it; None when a new request may go. Asked under our token,
        which fences the previous owner out at the service too."""
        if not ctx.needs_check:
            return None
        try:
            found = receiver.status(ctx.idempotency_key, object_id=object_id, fence=ctx.fencing_token,
                                    execution=str(ctx.call.id))
        except NoAnswer as exc:
            # the status could not be read: nobody can say, a human decides (record_check raises
            # OutcomeUnknown: the call has ended)
            ctx.record_check("unknown", {"receiver": receiver.name, "error": str(exc)})
            raise
        if found is not None:
            ctx.record_check("done", {"receiver": receiver.name, "confirmation": found["confirmation"]})
            return found
        ctx.record_check("not_done", {"receiver": receiver.name, "found": None})
        return None

    def _erp(self, ctx: CallContext, situation: str | None) -> Any:
        order = str(ctx.payload.get("order"))
        found = self._check_first(ctx, self.receivers.erp, order)
        if found is not None:
            return {"order": order, "confirmation": found["confirmation"], "verified": True}
        request = ctx.start_side_effect(f"erp-{uuid.uuid4().hex[:8]}")
        reply = self.receivers.erp.submit(object_id=order, idempotency_key=ctx.idempotency_key,
                                          fence=ctx.fencing_token, operation="update", sender=ctx.worker_id,
                                          body={"request": request}, execution=str(ctx.call.id),
                                          traceparent=ctx.traceparent)
        ctx.sleep(self.seconds(30 if situation == "slow" else self.rng.uniform(2, 6)))
        return {"order": order, "confirmation": reply.result["confirmation"]}

    def _pay(self, ctx: CallContext, situation: str | None) -> Any:
        request = ctx.start_side_effect(f"psp-{uuid.uuid4().hex[:8]}")
        reply = self.receivers.psp.submit(object_id=str(ctx.payload.get("invoice")),
                                          idempotency_key=ctx.idempotency_key, fence=ctx.fencing_token,
                                          operation="capture", sender=ctx.worker_id, body={"request": request},
                                          execution=str(ctx.call.id), traceparent=ctx.traceparent)
        if situation == "no_answer":
            ctx.sleep(self.seconds(2))
            raise ToolNoAnswer("gateway timeout after the capture request was sent")
        ctx.sleep(self.rng.uniform(0.5, 2.0) * self.tempo)
        return {"captured": True, "confirmation": reply.result["confirmation"]}

    def _export(self, ctx: CallContext) -> Any:
        found = self._check_first(ctx, self.receivers.exports, str(ctx.payload.get("report")))
        if found is not None:
            return {"stage": ctx.payload.get("stage"), "file": found["confirmation"], "verified": True}
        ctx.sleep(self.seconds(self._export_seconds(ctx)))
        request = ctx.start_side_effect(f"exp-{uuid.uuid4().hex[:8]}")
        reply = self.receivers.exports.submit(object_id=str(ctx.payload.get("report")),
                                              idempotency_key=ctx.idempotency_key, fence=ctx.fencing_token,
                                              operation="write-stage", sender=ctx.worker_id, body={"request": request},
                                              execution=str(ctx.call.id), traceparent=ctx.traceparent)
        result = {"stage": ctx.payload.get("stage"), "file": reply.result["confirmation"]}
        stage, stages = int(ctx.payload.get("stage") or 1), int(ctx.payload.get("stages") or 1)
        if stage < stages:
            # the next stage exists if and only if this one's file is recorded: one transaction
            # (worker/complete_and_enqueue.sql), a child of this call with its deadline
            key = ctx.idempotency_key.replace(f":stage:{stage}", f":stage:{stage + 1}", 1)
            return ctx.next_stage("report_export", key, {**ctx.payload, "stage": stage + 1}, result=result)
        return result

    def _export_seconds(self, ctx: CallContext) -> float:
        """How long a stage writes (before tempo): 8 to 18 s; in the night's trouble (slow_stage), a
        quick first stage and then one that crawls far past its chain's deadline."""
        slow = ctx.payload.get("slow_stage")
        if slow is None:
            return self.rng.uniform(8, 18)
        return 240.0 if ctx.payload.get("stage") == slow else 5.0

    def _die(self, ctx: CallContext) -> Any:
        """Send the request, then die: no more heartbeats, no result, ever (like a killed pod).
        The orchestrator starts a replacement worker under a new name."""
        order = str(ctx.payload.get("order"))
        request = ctx.start_side_effect(f"erp-{uuid.uuid4().hex[:8]}")
        self.receivers.erp.submit(object_id=order, idempotency_key=ctx.idempotency_key, fence=ctx.fencing_token,
                                  operation="update", sender=ctx.worker_id, body={"request": request},
                                  execution=str(ctx.call.id), traceparent=ctx.traceparent)
        ctx.worker.partitioned.set()  # from the database's point of view the worker is gone
        with self._lock:
            self._dead += 1
            replacement = f"w-erp-{2 + self._dead}"
        self.say(f"worker {ctx.worker_id} died holding call {ctx.call.short_id}; the orchestrator restarts it as "
                 f"{replacement} later")
        # like an orchestrator's back-off: meanwhile the lease expires and lies there, unreclaimed
        timer = threading.Timer(self.seconds(45), self._start_worker, args=(replacement, ["erp_update_order"]))
        timer.daemon = True
        timer.start()
        raise WorkerDied(ctx.worker_id)

    def _partitioned_search(self, ctx: CallContext) -> Any:
        """Cut off from the database mid-call, while the search still answers; by the time the
        network is back, another worker has the call: every write of ours is refused."""
        subject = f"q:{ctx.payload.get('q')}"
        ctx.record_event("tool_request_started", {"external_request_id": "req-part"})
        reply = self.receivers.search.submit(object_id=subject, idempotency_key=ctx.idempotency_key,
                                             fence=ctx.fencing_token, operation="search", sender=ctx.worker_id,
                                             execution=str(ctx.call.id), traceparent=ctx.traceparent)
        ctx.worker.partitioned.set()
        self.say(f"worker {ctx.worker_id} is cut off from the database holding call {ctx.call.short_id}")
        time.sleep(ctx.call.lease_seconds + self.seconds(10))  # the lease expires; someone reclaims it
        # the network comes back once another worker has the call (the story is "a zombie wakes up
        # after its lease was taken"); how long a free worker takes to appear varies with the load
        deadline = time.monotonic() + self.seconds(90)
        while not self.stop.is_set() and time.monotonic() < deadline:
            now = self._with_conn(lambda c: run_one(c, "views/job", job_id=ctx.call.id))
            if now is None or now["fencing_token"] > ctx.fencing_token:
                break
            self.stop.wait(self.seconds(1))
        ctx.worker.partitioned.clear()
        try:  # a late follow-up with our old token: the receiver has seen a newer one by now
            self.receivers.search.submit(object_id=subject, idempotency_key=ctx.idempotency_key + ":more",
                                         fence=ctx.fencing_token, operation="search-more", sender=ctx.worker_id,
                                         execution=str(ctx.call.id), traceparent=ctx.traceparent)
        except StaleFence as exc:
            ctx.record_event("receiver_rejected", {"receiver": "search-api", "highest_fence": exc.highest,
                                                   "external_request_id": "req-part-2"})
        return {"hits": 10, "confirmation": reply.result["confirmation"]}
