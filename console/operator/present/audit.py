"""The auditor's answers put into words, for `leasectl audit` and the Audit screen alike: who held a
call at an instant, its stretches of ownership, the operator journal, what verify found, and where
the online history begins once months of it were archived (console/core/history.py). Every value
that came from the database passes `sanitize` (through `t` / `one_line`) on its way in."""

from __future__ import annotations

from datetime import datetime

from rich.console import Group, RenderableType
from rich.text import Text

from console.core.audit import AuditPage, OperatorAction, VerifyReport
from console.core.history import ARCHIVE_RULES, Archived, HistoryStart
from console.core.ownership import ENDINGS, RULES, Holding, OwnerAt
from console.operator.present.logins import legend_if_claimed, who_text
from console.operator.present.words import STYLE, when
from console.shared.text import counted, format_seconds, sanitize

OUTCOME_STYLE = {"applied": STYLE["ok"], "refused": STYLE["warn"], "failed": STYLE["bad"]}


def ending_words(ended_by: str | None) -> str:
    if ended_by is None:
        return "no later event has ended it"
    return f"{ended_by.replace('_', ' ')}: {ENDINGS.get(ended_by, ended_by)}"


def instant_words(at: datetime, zone: str) -> str:
    """`2026-12-03 02:13:00.000 UTC`, and how it was given when that was not UTC."""
    shown = when(at)
    if zone == "ago":
        return f"{shown} (given as an age, back from the database's clock)"
    if zone != "UTC":
        return f"{shown} (given in {sanitize(zone, max_chars=40)}: {at.isoformat()})"
    return shown


def owner_answer(answer: OwnerAt) -> Text:
    """Who held the call at that instant, with its token, from, until and how it ended."""
    text = Text()
    text.append(f"call {str(answer.job_id)[:8]}", style="bold")
    text.append(f" at {instant_words(answer.at, answer.zone)}\n")
    if not answer.existed:
        created = f" (it was created {when(answer.created_at)})" if answer.created_at else ""
        text.append(f"the call did not exist yet{created}: nobody held it", style=STYLE["none"])
        return text
    if answer.owner_id is None:
        text.append("nobody held its lease", style="bold yellow")
        text.append(f" (state {sanitize(answer.state or '?', max_chars=40)}, fencing token "
                    f"{answer.fencing_token if answer.fencing_token is not None else '—'})")
        if answer.previous is not None:
            p = answer.previous
            text.append("\nlast held by ")
            text.append(sanitize(p.owner_id, max_chars=80), style="bold")
            text.append(f" with token {p.fencing_token}, from {when(p.held_from)} until {when(p.held_until)} "
                        f"({ending_words(p.ended_by)})")
        return text
    text.append("held by ")
    text.append(sanitize(answer.owner_id, max_chars=80), style="bold green")
    text.append(" with fencing token ")
    text.append(str(answer.fencing_token), style="bold")
    text.append(f", from {when(answer.held_from)}")
    if answer.held_until is not None:
        text.append(f" until {when(answer.held_until)}")
        text.append(f" ({ending_words(answer.ended_by)})")
        h = answer.holding
        if h is not None and h.end_event_id is not None:
            by = f" by {sanitize(h.end_actor, max_chars=80)}" if h.end_actor else ""
            text.append(f"; ended in event #{h.end_event_id}{by}", style=STYLE["none"])
    else:
        text.append(" on; no later event has ended it", style="bold")
        text.append(" (heartbeats are not journaled: as far as the history tells, the owner still held it)",
                    style=STYLE["none"])
    return text


def stamp(value: datetime | None) -> str:
    """`2026-12-03 02:13:00.123` (UTC; the heading says so)."""
    return when(value).removesuffix(" UTC") if value is not None else "—"


def holding_line(h: Holding) -> Text:
    """One stretch: who, token, from -> until, how it ended (wraps on a narrow terminal)."""
    text = Text()
    text.append(sanitize(h.owner_id, max_chars=80), style="bold")
    text.append(f"  token {h.fencing_token}  {stamp(h.held_from)} → ")
    text.append(stamp(h.held_until) if h.held_until else "on (no later event)")
    text.append(f"  {ending_words(h.ended_by) if h.ended_by else 'holds it'}", style=STYLE["none"])
    return text


def holdings_block(holdings: list[Holding]) -> Group:
    """Every stretch of ownership, oldest first."""
    head = Text("ownership, from the history alone (times UTC)", style="bold")
    if not holdings:
        return Group(head, Text("  nobody has held it", style=STYLE["none"]))
    return Group(head, *(Text.assemble("  ", holding_line(h)) for h in holdings))


def owner_group(answer: OwnerAt, start: HistoryStart | None = None) -> Group:
    """`leasectl audit owner`."""
    warning = history_warning(answer)
    head = (warning, Text("")) if warning is not None else ()
    tail: tuple[Text, ...] = ()
    if start is not None and start.archived_before is not None:
        tail = (Text(""), Text(f"the online history begins at {when(start.archived_before)}, before it "
                               f"{start.archive_words()}; this call's history is whole online",
                               style=STYLE["none"]))
    return Group(*head, owner_answer(answer), Text(""), holdings_block(answer.timeline), *tail)


# ----------------------------------------------------------------------------- archived history


def archived_answer(refusal: Archived) -> Text:
    """An answer that rests on archived history, said plainly: ARCHIVED, why, and where it is."""
    text = Text("ARCHIVED", style="bold yellow")
    text.append(" — " + sanitize(str(refusal).removeprefix("archived: "), max_chars=1_000))
    if refusal.hint:
        text.append(f"\n{sanitize(refusal.hint, max_chars=300)}", style=STYLE["none"])
    return text


def online_part_note(start: HistoryStart) -> str:
    """Said (on stderr) of an answer given with no start once history was archived."""
    return (f"the online history begins at {when(start.archived_before)}: this answer covers it from then on; "
            f"the events before it are archived, in {start.archive_words()}")


def past_note(start: HistoryStart) -> str:
    """Said of `jobs --at T` once history was archived: what the list leaves out."""
    return (f"the calls created before {when(start.archived_before)} (where the online history begins) are not "
            f"listed: every one had finished by then, and their history is archived, in {start.archive_words()}")


def left_out(start: HistoryStart) -> Text | None:
    """The calls screens' tail with at: once history was archived: what the past they show leaves out."""
    return Text(past_note(start), style="magenta") if start.archived else None


def archive_banner(page: AuditPage) -> Text | None:
    """The Audit screen's line on where the online history begins, and what that meant for what it
    shows, the most important first (at 80x24 it has two lines): a refused range, rows that are the
    online part only, or the whole history online from then on."""
    start = page.history
    if start.archived_before is None:
        return None
    begins = when(start.archived_before)
    archive = f"before it archived ({start.span_words()}; `leasectl audit verify --archive DIR` checks it)"
    text = Text()
    if page.refused:
        text.append("ARCHIVED", style="bold yellow")
        text.append(f": the filter reaches before {begins}, where the online history begins — nothing is shown, "
                    "not a part as the whole · ")
    elif page.online_part:
        text.append("online part only", style="bold yellow")
        text.append(f": these rows are from {begins} on · ")
    else:
        text.append(f"online history from {begins} · ", style="bold")
    text.append(archive, style=STYLE["none"])
    return text


def oldest_page_words(start: HistoryStart) -> str:
    """`]` past the last page once history was archived."""
    return (f"This is the oldest online page: the events before {when(start.archived_before)} are archived "
            f"({start.archive_words()}).")


def history_warning(answer: OwnerAt) -> Text | None:
    """When the call's history breaks the rules (written behind the triggers' back): the answer
    is not one owner, and the auditor must hear so before reading it."""
    if not answer.also_held and not answer.violations:
        return None
    text = Text("THE HISTORY OF THIS CALL BREAKS THE RULES", style="bold red")
    for h in answer.also_held:
        text.append("\nalso held then by ")
        text.append(sanitize(h.owner_id, max_chars=80), style="bold")
        text.append(f" with fencing token {h.fencing_token}, from {when(h.held_from)} (event #{h.claim_event_id})")
    for v in answer.violations[:5]:
        text.append(f"\n{sanitize(v.rule)}: {sanitize(v.why, max_chars=300)}")
    if len(answer.violations) > 5:
        text.append(f"\n… and {len(answer.violations) - 5} more")
    text.append("\nleasectl audit verify lists every violation (exit 4)", style=STYLE["none"])
    return text


def action_words(a: OperatorAction) -> str:
    return a.action.replace("_", " ")


def action_detail(a: OperatorAction) -> str:
    """What the outcome rests on: the refusal, the error and its cause, the terminal state chosen."""
    d = a.details
    parts = []
    if d.get("refusal"):
        parts.append(str(d["refusal"]))
    if d.get("error"):
        parts.append(str(d["error"]))
    if d.get("cause"):
        parts.append(f"cause {d['cause']}")
    if d.get("terminal_state") and a.outcome == "applied":
        parts.append(f"as {d['terminal_state']}" + (" (forced: owner fenced out)" if d.get("fenced_owner") else ""))
    if a.source == "fleet" and d.get("window_seconds") is not None:
        parts.append(f"window {format_seconds(float(d['window_seconds']))}")
    return sanitize("; ".join(parts), max_chars=300)


def target_words(a: OperatorAction) -> str:
    """What an action acted on: a call, a subtree or a tool (a pause, migration 0016)."""
    if a.job_id:
        return f"call {str(a.job_id)[:8]}"
    if a.action in ("pause", "resume"):
        return f"tool {sanitize(str((a.details or {}).get('tool') or '—'), max_chars=80)}"
    if a.action == "revoke":
        return (f"grant {sanitize(str((a.details or {}).get('grant_id') or '—')[:8])} "
                f"of {sanitize(a.agent_id or '—', max_chars=80)}")
    if a.action in ("accept", "decline"):  # a proposed shutdown (migration 0018)
        d = a.details or {}
        return (f"proposed {sanitize(str(d.get('mode') or 'shutdown'))} of {sanitize(a.agent_id or '—', max_chars=80)}"
                f" (by {sanitize(str(d.get('proposed_by') or '—'), max_chars=80)})")
    return f"subtree of {sanitize(a.agent_id or '—', max_chars=80)}"


def action_line(a: OperatorAction) -> Text:
    """One journal entry in two lines: when, who, what, the outcome and on what; then the reason
    and what the outcome rests on (a refusal, an error and its cause)."""
    text = Text()
    text.append(stamp(a.at))
    text.append("  ")
    text.append_text(who_text(a.operator, a.db_role, operator=True, style="bold"))
    text.append(f"  {action_words(a)}  ")
    text.append(a.outcome.upper(), style=OUTCOME_STYLE.get(a.outcome, ""))
    text.append("  " + target_words(a))
    if a.job_id and a.agent_id:
        text.append(f" (agent {sanitize(a.agent_id, max_chars=80)})", style=STYLE["none"])
    why = action_detail(a)
    text.append("\n    ")
    text.append(f"reason: {sanitize(a.reason or '—', max_chars=1_000)}")
    if why:
        text.append(f" · {why}", style=STYLE["none"])
    return text


def actions_block(actions: list[OperatorAction]) -> Group:
    """`leasectl audit actions`: the operator journal, newest first, and what a login mark means
    when one is shown."""
    head = Text(f"operator journal ({counted(len(actions), 'action')}, newest first, times UTC)", style="bold")
    legend = legend_if_claimed([(a.operator, a.db_role, True) for a in actions])
    return Group(head, *(action_line(a) for a in actions), *((legend,) if legend is not None else ()))


def verify_words(report: VerifyReport) -> RenderableType:
    """`leasectl audit verify`: all hold, or each violation with its call, its events and why; and,
    once history was archived, what of it was checked and replayed, and what was not."""
    scope = f"since {when(report.since)}" if report.since else "the whole history"
    head = Text()
    archived = f" and {counted(report.archived_events, 'archived event')}" if report.archived_events else ""
    head.append(f"verified {counted(report.calls, 'call')}, {counted(report.events, 'event')}{archived} ({scope}, "
                f"read {when(report.checked_at)}, {report.seconds:.1f} s): ")
    logins = logins_words(report)
    archive = archive_words(report)
    after = [t for t in (logins, *archive) if t is not None]
    if report.ok:
        head.append("every check holds", style="bold green")
        head.append(" — no two owners at one instant, tokens only rose, every finished call finished once, "
                    "every ownership change has its event, no worker login wrote what it may not", style="dim")
        return Group(head, *after) if after else head
    found = len(report.violations) + len(report.archive_violations)
    head.append(counted(found, "violation"), style="bold red")
    lines: list[Text] = [head]
    for a in report.archive_violations:
        line = Text()
        line.append(f"archived month {sanitize(a.month, max_chars=20)}", style="bold")
        line.append("  ")
        line.append(a.rule, style="bold red")
        if a.file:
            line.append(f"  {sanitize(a.file, max_chars=120)}")
        line.append("\n    ")
        line.append(sanitize(a.why, max_chars=1_000))
        line.append(f" ({ARCHIVE_RULES.get(a.rule, a.rule)})", style=STYLE["none"])
        lines.append(line)
    for v in report.violations:
        line = Text()
        line.append(f"call {v.job_id}", style="bold")
        line.append("  ")
        line.append(v.rule, style="bold red")
        line.append("  events " + ", ".join(f"#{i}" for i in v.event_ids))
        if v.kind is not None:
            line.append(f"  {sanitize(v.kind, max_chars=60)}")
        if v.db_role is not None:
            line.append(f"  login {sanitize(v.db_role, max_chars=80)}")
        line.append("\n    ")
        line.append(sanitize(v.why, max_chars=1_000))
        line.append(f" ({RULES.get(v.rule, v.rule)})", style=STYLE["none"])
        lines.append(line)
    lines.extend(after)
    return Group(*lines)


def archive_words(report: VerifyReport) -> list[Text]:
    """What verify could say of the archived history: where the online history begins, the archive
    checked (or not given), and the calls not replayed for want of it."""
    if report.archived_before is None and report.archive is None:
        return []
    lines: list[Text] = []
    text = Text(style=STYLE["none"])
    if report.archived_before is not None:
        text.append(f"archived history: the online history begins at {when(report.archived_before)}")
    else:
        text.append("archived history: the database has archived nothing")
    if report.archive is not None:
        months = ", ".join(sanitize(m, max_chars=20) for m in report.archive_months_checked) or "none"
        text.append(f"; the archive {sanitize(report.archive, max_chars=200)} was checked against what the database "
                    f"registered (months: {months})")
        if report.archive_violations:
            text.append(" and does not hold: it was not replayed")
        elif report.archived_events:
            text.append(f", and its {counted(report.archived_events, 'event')} replayed before the online ones")
    lines.append(text)
    if report.calls_not_replayed:
        lines.append(Text(f"{counted(report.calls_not_replayed, 'call')} not replayed: each one's history begins "
                          "in the archive (created before the online history begins); "
                          + ("pass --archive DIR (the directory retention wrote) to replay them"
                             if report.archive is None else "the archive must hold to replay them"),
                          style="bold yellow"))
    if report.archive_months_online:
        lines.append(Text("the manifest also lists "
                          + ", ".join(sanitize(m, max_chars=20) for m in report.archive_months_online)
                          + ": months the database still holds (not archived yet), not used", style=STYLE["none"]))
    return lines


def logins_words(report: VerifyReport) -> Text | None:
    """What the login check could not cover: events with no login (before migration 0005) and
    logins that are no longer roles; nothing when it covered every event."""
    if not report.without_login and not report.unknown_logins:
        return None
    text = Text("logins: ", style=STYLE["none"])
    parts = []
    if report.without_login:
        parts.append(f"no login recorded on {counted(report.without_login, 'event')} (written before migration "
                     "0005): not checkable against their kind")
    if report.unknown_logins:
        unknown = sum(u.events for u in report.unknown_logins)
        names = ", ".join(f"{sanitize(u.db_role, max_chars=60)} ({counted(u.events, 'event')})"
                          for u in report.unknown_logins[:10])
        more = f", and {len(report.unknown_logins) - 10} more" if len(report.unknown_logins) > 10 else ""
        parts.append(f"{counted(unknown, 'event')} by unknown logins, no longer roles and so not checkable: "
                     f"{names}{more}")
    text.append("; ".join(parts), style=STYLE["none"])
    return text
