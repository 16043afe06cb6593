"""The auditor's answers put into words, for `leasectl audit` and the Audit screen alike: who held a
call at an instant, its stretches of ownership, the operator journal, what verify found. Every
value that came from the database passes `sanitize` (through `t` / `one_line`) on its way in."""

from __future__ import annotations

from datetime import datetime

from rich.console import Group, RenderableType
from rich.text import Text

from console.core.audit import OperatorAction, VerifyReport
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


def owner_group(answer: OwnerAt) -> Group:
    """`leasectl audit owner`."""
    warning = history_warning(answer)
    head = (warning, Text("")) if warning is not None else ()
    return Group(*head, owner_answer(answer), Text(""), holdings_block(answer.timeline))


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
    """`leasectl audit verify`: all hold, or each violation with its call, its events and why."""
    scope = f"since {when(report.since)}" if report.since else "the whole history"
    head = Text()
    head.append(f"verified {counted(report.calls, 'call')}, {counted(report.events, 'event')} ({scope}, read "
                f"{when(report.checked_at)}, {report.seconds:.1f} s): ")
    logins = logins_words(report)
    if report.ok:
        head.append("every check holds", style="bold green")
        head.append(" — no two owners at one instant, tokens only rose, every finished call finished once, "
                    "every ownership change has its event, no worker login wrote what it may not", style="dim")
        return Group(head, logins) if logins is not None else head
    head.append(counted(len(report.violations), "violation"), style="bold red")
    lines: list[Text] = [head]
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
    if logins is not None:
        lines.append(logins)
    return Group(*lines)


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
