"""`leasectl views save|list|delete`: saved views (issue 30; migration 0022), the console's `v`.

    leasectl views save NAME --screen S --where FILTER [--shared] [--replace]
    leasectl views list [--screen S] [--json]
    leasectl views delete NAME [--shared]

A view is a screen's filter under a name: personal (this login's alone) or shared (every console
login). The screen is one of the console's screens with a `/` filter; the filter is checked with
that screen's grammar before anything is sent (bad input: exit 2, nothing written). A name that
is taken asks before it is replaced (`--replace` replaces without asking; no answer, or no
terminal, changes nothing: exit 2). Who may see, replace and delete a view is the database's
rule, keyed on the login: another login's shared view is refused (not allowed: exit 1), and so
is any save or delete on a read-only session (--read-only, an auditor), before anything is sent.
`views list` says, for each view that no longer parses (a key renamed since it was saved), why:
the `problem` column (and key, in --json); listing is a read and exits 0 all the same.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from console.core.saved_views import check_filter, check_name, check_screen, screen_names
from console.db import saved_views as db_views
from console.operator.cli.common import (
    DsnOption,
    JsonOption,
    OperatorOption,
    app,
    connect_for_acting,
    connect_for_reading,
    err,
    friendly,
    operator_option,
    out,
    print_json,
    refuse_if_read_only,
)
from console.operator.present.saved_views import (
    NO_VIEWS_HINT,
    delete_words,
    exists_words,
    no_views,
    not_yours_words,
    restore_command,
    save_words,
    stale_summary,
    views_table,
)
from console.shared.errors import EXIT_BAD_INPUT, PermissionDenied

views_app = typer.Typer(name="views", add_completion=False, no_args_is_help=True,
                        help="Saved views: a screen's filter under a name, personal or shared (the console's v).")
app.add_typer(views_app)

NameArgument = Annotated[str, typer.Argument(help="The view's name (1 to 60 characters)", show_default=False)]
ScreenOption = Annotated[str, typer.Option("--screen", help=f"The screen it filters: {screen_names()}",
                                           show_default=False)]
SharedOption = Annotated[bool, typer.Option("--shared", help="Every console login sees it (default: only yours)")]


@views_app.command("save")
@friendly
def save(name: NameArgument, screen: ScreenOption,
         where: Annotated[str, typer.Option("--where", help="The filter, in the screen's grammar (what / takes "
                                                            "there)", show_default=False)],
         shared: SharedOption = False,
         replace: Annotated[bool, typer.Option("--replace", help="Replace a view of yours of that name without "
                                                                 "asking")] = False,
         operator: OperatorOption = None, dsn: DsnOption = None) -> None:
    """Save a screen's filter as a view (checked with the screen's grammar first)."""
    screen = check_screen(screen)
    name = check_name(name)
    where = check_filter(screen, where)
    who = operator_option(operator)
    refuse_if_read_only("saving a view")
    with connect_for_acting(dsn, "saving a view") as conn:
        result = db_views.save_view(conn, name=name, screen=screen, filter_text=where, shared=shared,
                                    operator=who, replace=replace)
        if result.outcome == "exists":
            err.print(escape(exists_words(result.view)))
            if not result.view.mine and result.view.shared:
                raise PermissionDenied(not_yours_words(result.view, "replace"),
                                       hint="choose another name (or save it as a personal view)")
            _ask_to_replace()
            result = db_views.save_view(conn, name=name, screen=screen, filter_text=where, shared=shared,
                                        operator=who, replace=True)
    if result.outcome == "not_yours":
        raise PermissionDenied(not_yours_words(result.view, "replace"),
                               hint="choose another name (or save it as a personal view)")
    out.print(f"[bold green]{escape(save_words(result))}[/]")


def _ask_to_replace() -> None:
    try:
        answered = typer.confirm("Replace it?", default=False, err=True)
    except typer.Abort:  # end of input: nobody said yes
        answered = False
    if not answered:
        err.print("not replaced: nothing changed (--replace replaces without asking)")
        raise typer.Exit(EXIT_BAD_INPUT)


@views_app.command("list")
@friendly
def list_views(screen: Annotated[str | None, typer.Option("--screen", help=f"Only this screen's: {screen_names()}",
                                                          show_default=False)] = None,
               as_json: JsonOption = False, dsn: DsnOption = None) -> None:
    """Your personal views and every shared one; a view that no longer parses says why (problem)."""
    wanted = check_screen(screen) if screen is not None else None
    with connect_for_reading(dsn) as conn:
        views = db_views.list_views(conn, wanted)
    if as_json:
        print_json([v.document() for v in views])
        return
    if not views:
        err.print(escape(no_views(wanted)))
        err.print(f"[dim]hint:[/] {escape(NO_VIEWS_HINT)}")
        return
    out.print(views_table(views))
    stale = stale_summary(views)
    if stale:
        err.print(f"[bold yellow]{escape(stale)}[/]")


@views_app.command("delete")
@friendly
def delete(name: NameArgument,
           shared: Annotated[bool, typer.Option("--shared", help="The shared view of that name (default: your "
                                                                 "personal one)")] = False,
           dsn: DsnOption = None) -> None:
    """Delete your personal view NAME, or (--shared) the shared view NAME if you saved it."""
    name = check_name(name)
    refuse_if_read_only("deleting a view")
    with connect_for_acting(dsn, "deleting a view") as conn:
        result = db_views.delete_view(conn, name, shared=shared)
    if not result.deleted:
        raise PermissionDenied(not_yours_words(result.view, "delete"))
    out.print(f"[bold green]{escape(delete_words(result))}[/]")
    out.print(f"[dim]to save it again: {escape(restore_command(result.view))}[/]")
