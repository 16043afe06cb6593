"""One browser tab's console: the same LeasectlApp as in a terminal, run by the serve process
through Textual's web driver (textual-serve's AppService starts it and bridges its stdin/stdout
to the tab's websocket). Who it works as comes from the server in one environment variable, set
for this process alone: the person's operator name, their database login (a DSN), and whether
they are read-only. Nothing the browser sends can change them: the browser only sends keys,
mouse events and its size.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from pydantic import BaseModel, ConfigDict

SESSION_ENV = "LEASECTL_WEB_SESSION"


class PersonSession(BaseModel):
    """What serve tells a console process about its person."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    person: str
    role: str
    operator: str
    dsn: str
    read_dsn: str | None = None
    read_only_because: str | None = None
    label: str | None = None
    shown_dsn: str | None = None
    poll_seconds: float = 2.0

    def to_env(self) -> str:
        return self.model_dump_json()


PARENT_ENV = "LEASECTL_WEB_PARENT"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """This console ends with the serve process that started it, however that one ends: a serve
    killed with SIGKILL has no time to stop its tabs, and a console left behind would keep its
    person's connections open and polling (Linux: PR_SET_PDEATHSIG; checked after it is set, since
    serve may have died just before)."""
    parent = os.environ.pop(PARENT_ENV, None)
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent is not None and os.getppid() != int(parent):
        raise SystemExit(1)


def main() -> None:
    die_with_parent()
    raw = os.environ.pop(SESSION_ENV, None)  # not inherited by anything this process starts
    if raw is None:
        print(f"error: {SESSION_ENV} is not set: this program is started by `leasectl serve`, one per browser tab",
              file=sys.stderr)
        raise SystemExit(2)
    person = PersonSession.model_validate(json.loads(raw))

    from console.db.session import ConsoleSession
    from console.operator.present.contexts import ONE_DATABASE_IN_A_BROWSER
    from console.operator.tui.app import LeasectlApp

    session = ConsoleSession(person.dsn, operator=person.operator, read_only=person.read_only_because is not None,
                             read_only_because=person.read_only_because, label=person.label,
                             shown_dsn=person.shown_dsn, read_dsn=person.read_dsn,
                             known_contexts=dict, contexts_withheld=ONE_DATABASE_IN_A_BROWSER)
    LeasectlApp(session, poll_seconds=person.poll_seconds).run()


if __name__ == "__main__":
    main()
