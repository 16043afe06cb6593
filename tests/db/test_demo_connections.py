"""The demo's "worker dies" situation leaves no connection behind (41 -> 49 connections
in 8 minutes, two per death, until the embedded server's 100 ran out). A dead worker is like a
killed pod: its connections end with it, and the replacement the orchestrator starts brings its
own. Played on a real database, only the ERP pool running, at tempo 0.05."""

from __future__ import annotations

import threading

from console.demo.fleet import Fleet
from tests.helpers import wait_until

DEATHS = 4


def demo_connections(conn) -> dict[str, int]:
    rows = conn.execute("select application_name as name, count(*) as n from pg_stat_activity "
                        "where datname = current_database() and pid <> pg_backend_pid() "
                        "and application_name like 'leasectl-%%' group by application_name").fetchall()
    return {r["name"]: r["n"] for r in rows}


def test_a_dying_worker_closes_its_connections_and_the_count_does_not_grow(db):
    dead: set[str] = set()
    died = threading.Event()

    def say(text: str) -> None:
        if text.startswith("worker ") and " died holding call " in text:
            dead.add(text.split()[1])
            died.set()

    fleet = Fleet(db.dsn, seed=3, tempo=0.05, say=say)
    with db.connect() as conn:
        fleet.prepare(conn)
        fleet._start_worker("w-erp-1", ["erp_update_order"])
        fleet._start_worker("w-erp-2", ["erp_update_order"])
        try:
            counts = []
            for death in range(1, DEATHS + 1):
                died.clear()
                fleet._set_off_worker_dies()
                assert died.wait(30), f"death {death} did not happen"
                # the orchestrator's replacement (45 s x tempo later) is running
                wait_until(lambda n=death: len(fleet.workers) == 2 + n, timeout=30, what="the replacement worker")

                def settled() -> dict[str, int] | None:
                    now = demo_connections(conn)
                    held = [name for name in now if name.removeprefix("leasectl-worker:").split(":")[0] in dead]
                    return None if held else now

                counts.append(wait_until(settled, timeout=10, what=f"no connection held by a dead worker ({dead})"))
            assert len(dead) == DEATHS
            totals = [sum(c.values()) for c in counts]
            # two ERP workers alive at any time, each with a claim and a heartbeat connection at most
            # (and a situation's short-lived one)
            assert max(totals) <= 2 * 2 + 1, counts
            assert totals[-1] <= totals[0] + 1, f"the count grew: {totals}"
        finally:
            fleet.shutdown()
