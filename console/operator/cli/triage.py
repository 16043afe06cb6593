"""`leasectl triage`: what the Triage screen shows -- the counts and the calls that need attention
-- for one database, or, with `--all-contexts`, for every context of contexts.toml at once
(console.db.everywhere), each row with its context.

With `--all-contexts` a context that does not answer within `--timeout` is named as down and the
answer is partial: exit 1, and the text never says "nothing needs attention". Exit 0 when every
context answered (whatever they hold: the answer is the list); 2 for bad input, or no contexts.
"""

from __future__ import annotations

from typing import Annotated

import typer

from console.db import reads
from console.db.everywhere import DEFAULT_TIMEOUT_SECONDS, triage_everywhere
from console.operator.cli.common import (
    DsnOption,
    JsonOption,
    app,
    before,
    connect_for_reading,
    friendly,
    out,
    print_json,
)
from console.operator.present.everywhere import NO_CONTEXTS_HINT, all_contexts_text, no_contexts, triage_text
from console.shared.contexts import contexts_path, load_contexts
from console.shared.errors import EXIT_OTHER, BadInput

MAX_TIMEOUT_SECONDS = 120.0


@app.command()
@friendly
def triage(
    all_contexts: Annotated[bool, typer.Option("--all-contexts", help="Every context of contexts.toml, asked at "
                                               "once, each row with its context; exit 1 when any context did not "
                                               "answer (the answer is partial)")] = False,
    timeout: Annotated[float | None, typer.Option("--timeout", min=0.5, max=MAX_TIMEOUT_SECONDS, show_default=False,
                                                  help="With --all-contexts: the seconds each context has to "
                                                       f"answer (default {DEFAULT_TIMEOUT_SECONDS:g})")] = None,
    as_json: JsonOption = False,
    dsn: DsnOption = None,
) -> None:
    """What needs attention now: the counts and the calls, worst first (Triage, screen 1)."""
    if not all_contexts:
        if timeout is not None:
            raise BadInput("--timeout is an option of --all-contexts (one database answers within its "
                           "statement timeout)")
        with connect_for_reading(dsn) as conn:
            snapshot = reads.triage(conn)
        if as_json:
            print_json({"counts": snapshot.counts.model_dump(mode="json"),
                        "rows": [r.model_dump(mode="json") for r in snapshot.rows]})
        else:
            out.print(triage_text(snapshot.counts, snapshot.rows))
        return
    if dsn is not None or before().dsn is not None:
        raise BadInput("--all-contexts asks every context of contexts.toml; --dsn names one database: give one "
                       "of them")
    if before().context is not None:
        raise BadInput("--all-contexts asks every context; --context names one: give one of them")
    contexts = load_contexts()
    if not contexts:
        where = contexts_path()
        raise BadInput(no_contexts(where, where.exists()), hint=NO_CONTEXTS_HINT)
    answer = triage_everywhere(contexts.values(), timeout=timeout or DEFAULT_TIMEOUT_SECONDS)
    if as_json:
        print_json(answer.document())
    else:
        out.print(all_contexts_text(answer, out.width))
    if answer.partial:
        raise typer.Exit(EXIT_OTHER)
