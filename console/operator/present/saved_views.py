"""Saved views in words (issue 30): `leasectl views`, and the console's picker (`v`).

A view is marked personal or shared wherever it is shown, with who saved it (the operator's name
and, when it is not this login, the login the database recorded). A view whose filter no longer
parses says why, loudly, in place of its filter's meaning: it is shown, never applied.
"""

from __future__ import annotations

import shlex

from rich import box
from rich.table import Table
from rich.text import Text

from console.core.saved_views import SCREENS, DeleteOutcome, SavedView, SaveOutcome
from console.shared.text import sanitize

NAME_CHARS = 60
FILTER_CHARS = 120
PERSONAL_MARK = "●"  # the picker's marks: a personal view, a shared one, one that no longer parses
SHARED_MARK = "◆"
STALE_MARK = "✗"
NO_VIEWS_HINT = ("save one: leasectl views save NAME --screen SCREEN --where FILTER [--shared] "
                 "(in the console: v, then s)")
READ_ONLY_SAVE = "Read-only console ({why}): saved views can be opened, not saved or deleted."
NOTHING_TO_SAVE = "This screen has no filter to save: / sets one, then v and s save it."


def screen_title(screen: str) -> str:
    """`2 Calls` for `calls` (a screen this release does not have: its name as saved)."""
    return SCREENS[screen].title if screen in SCREENS else sanitize(screen, max_chars=40)


def _name(view: SavedView) -> str:
    return sanitize(view.name, max_chars=NAME_CHARS)


def owner_words(view: SavedView) -> str:
    """`alice` (and its login, `alice (login lc_alice)`, when the view is not this login's)."""
    who = sanitize(view.created_by, max_chars=40)
    return who if view.mine else f"{who} (login {sanitize(view.db_role, max_chars=40)})"


def scope_words(view: SavedView) -> str:
    """`personal`, `shared, yours` or `shared by alice (login lc_alice)`."""
    if not view.shared:
        return "personal"
    return "shared, yours" if view.mine else f"shared by {owner_words(view)}"


def views_table(views: list[SavedView]) -> Table:
    """`leasectl views list`: name, screen, personal or shared, the filter, who saved it and when,
    and the problem of a view that no longer parses (bold red; its filter then is not applied)."""
    table = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("name", "screen", "scope", "filter", "saved by", "saved", "problem"):
        table.add_column(column, no_wrap=column in ("screen", "scope", "saved"), overflow="fold")
    for v in views:
        saved = (v.updated_at or v.created_at).strftime("%Y-%m-%d %H:%M")
        table.add_row(Text(_name(v), "bold"), Text(v.screen), Text(v.scope, "cyan" if v.shared else ""),
                      Text(sanitize(v.filter, max_chars=FILTER_CHARS), "dim" if v.problem else ""),
                      Text(owner_words(v)), Text(saved),
                      Text(sanitize(v.problem, max_chars=200), "bold red") if v.problem else Text(""))
    return table


def no_views(screen: str | None) -> str:
    return "no saved views" + (f" of screen {screen}" if screen else "") + " visible to this login"


def stale_summary(views: list[SavedView]) -> str | None:
    """One line under the table when some views no longer parse."""
    stale = [v for v in views if v.problem]
    if not stale:
        return None
    names = ", ".join(_name(v) for v in stale[:5]) + (" …" if len(stale) > 5 else "")
    return (f"{len(stale)} view(s) no longer parse and would not be applied: {names}. Save each again with a "
            "filter of this release's grammar (--replace), or delete it")


def restore_command(view: SavedView) -> str:
    """The command that saves the view again as it was (after a delete: the way back)."""
    return ("leasectl views save " + shlex.quote(view.name) + f" --screen {view.screen} --where "
            + shlex.quote(view.filter) + (" --shared" if view.shared else ""))


def save_words(result: SaveOutcome) -> str:
    """What a save did, in one line (saved or replaced; exists and not_yours are said by the caller)."""
    v = result.view
    verb = "replaced" if result.outcome == "replaced" else "saved"
    return (f"{verb}: {v.scope} view {_name(v)!r} of the {screen_title(v.screen)} screen: "
            f"{sanitize(v.filter, max_chars=FILTER_CHARS)}")


def save_banner(result: SaveOutcome) -> str:
    """The console's line for a save that went through: `SAVED — personal view 'x' of 2 Calls: …`."""
    verb, _, rest = save_words(result).partition(": ")
    return f"{verb.upper()} — {rest}"


def exists_words(view: SavedView) -> str:
    """A view of that name is there already (the save asked nothing to be replaced)."""
    return (f"a view named {_name(view)!r} exists ({scope_words(view)}; {view.screen}: "
            f"{sanitize(view.filter, max_chars=FILTER_CHARS)})")


def not_yours_words(view: SavedView, verb: str) -> str:
    """Another login's shared view: the database refused to `verb` it."""
    return (f"refused: the shared view {_name(view)!r} was saved by {owner_words(view)}; only that login "
            f"(or the schema owner) may {verb} it. Nothing was changed")


def delete_words(result: DeleteOutcome) -> str:
    v = result.view
    return (f"deleted: {v.scope} view {_name(v)!r} of {screen_title(v.screen)}: "
            f"{sanitize(v.filter, max_chars=FILTER_CHARS)}")


# ----------------------------------------------------------------------------- the console's picker


def picker_row(view: SavedView) -> Text:
    """One view in the picker: its mark and name, personal or shared (and whose), its filter; a view
    that no longer parses in red, with why, instead of being applied."""
    text = Text()
    if view.problem:
        text.append(f"{STALE_MARK} ", style="bold red")
    else:
        text.append(f"{SHARED_MARK if view.shared else PERSONAL_MARK} ", style="cyan" if view.shared else "green")
    text.append(_name(view), style="bold")
    text.append(f"  {scope_words(view)}", style="cyan" if view.shared else "dim")
    text.append("\n    ")
    text.append(sanitize(view.filter, max_chars=FILTER_CHARS), style="dim" if view.problem else "")
    if view.problem:
        text.append("\n    does not parse, not applied: ", style="bold red")
        text.append(sanitize(view.problem, max_chars=200), style="red")
    return text


def picker_title(screen: str) -> str:
    return f"Saved views of {screen_title(screen)}"


def picker_hint(current: str, read_only: str | None) -> Text:
    """The picker's foot: what enter, s and esc do, and what the current filter is."""
    text = Text("enter applies the view (as / would) · ", style="dim")
    if read_only:
        text.append(f"read-only: no saving ({sanitize(read_only, max_chars=80)})", style="yellow")
    elif current:
        text.append(f"s saves the current filter ({sanitize(current, max_chars=60)}) as a view", style="dim")
    else:
        text.append("s: no filter to save (/ sets one)", style="dim")
    text.append(" · esc closes", style="dim")
    return text


def no_views_in_picker(screen: str) -> Text:
    return Text(f"No saved views of {screen_title(screen)} yet: s saves the current filter as one.", style="dim")


def stale_refusal(view: SavedView) -> str:
    return (f"The view {_name(view)!r} no longer parses, so it is not applied: {sanitize(view.problem or '')}. "
            "Save it again with a filter of this release's grammar, or delete it (leasectl views delete).")


def applied_words(view: SavedView) -> str:
    return f"View {_name(view)!r} ({view.scope}): {sanitize(view.filter, max_chars=FILTER_CHARS)}"
