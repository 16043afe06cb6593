"""Tools: their fair-share settings, and the pause that throttles a flaky vendor without stopping a
worker (docs/seeds.md §000; migration 0016)."""

from __future__ import annotations

from typing import Annotated

import typer

from console.db import actions, reads
from console.operator.cli.common import (
    DsnOption,
    JsonOption,
    OperatorOption,
    ReasonOption,
    answer,
    app,
    connect_for_acting,
    connect_for_reading,
    err,
    friendly,
    operator_option,
    out,
    print_json,
)
from console.operator.present.tools import pause_message, tools_table

ToolArgument = Annotated[str, typer.Argument(help="The tool's registered name", show_default=False)]


@app.command("tools")
@friendly
def list_tools(as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """Registered tools: class, calls running and queued, caps, hold, attempts; paused ones first."""
    with connect_for_reading(dsn) as conn:
        found = reads.tools(conn)
    if as_json:
        print_json([t.model_dump(mode="json") for t in found])
        return
    out.print(tools_table(found))
    if not found:
        err.print("no tool is registered")


@app.command()
@friendly
def pause(tool: ToolArgument, reason: ReasonOption, operator: OperatorOption = None,
          dsn: DsnOption = None) -> None:
    """Pause a tool: none of its calls is claimed until it is resumed; running ones go on. Journaled."""
    who = operator_option(operator)
    with connect_for_acting(dsn, "pause") as conn:
        result = actions.pause_tool(conn, tool, operator=who, reason=reason)
    answer(*pause_message("pause", result))


@app.command()
@friendly
def resume(tool: ToolArgument,
           reason: Annotated[str, typer.Option("--reason", help="Why (journaled with your name)")] = "resumed",
           operator: OperatorOption = None, dsn: DsnOption = None) -> None:
    """Resume a paused tool: its queued calls are claimed again. Journaled with the pause it ends."""
    who = operator_option(operator)
    with connect_for_acting(dsn, "resume") as conn:
        result = actions.resume_tool(conn, tool, operator=who, reason=reason)
    answer(*pause_message("resume", result))
