"""A bulk action in words: what it will touch (by side-effect class and state, what changes for
each, what is skipped and why, the guard), and afterwards a line per call; a bulk operation (over
1,000 calls, or in the background) in words: its progress, its state, the calls not applied."""

from __future__ import annotations

from datetime import UTC

from rich import box
from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from console.core.bulk import LIMIT, BulkOperation, BulkOutcomeKind, BulkPlan, BulkResult, OperationCall
from console.operator.present.actions import guard_of, words_of
from console.operator.present.words import side_effect_words, state_label, state_style, t, when
from console.shared.text import counted, format_seconds, sanitize


def change_words(plan: BulkPlan, state: str) -> str:
    """What the action does to a call in this state (as read)."""
    return words_of(plan.action).change(state, plan.choices)


def question(plan: BulkPlan) -> str:
    """What is asked before it is sent: "cancel 9 calls"."""
    return f"{words_of(plan.action).bulk_verb} {counted(plan.count, 'call')}"


def confirmation(plan: BulkPlan) -> str:
    """What the operator types to confirm: the count; for unverifiable side effects (a retry may
    repeat what nobody can check), the words too."""
    if plan.spec.confirm_unverifiable and plan.unverifiable:
        return words_of(plan.action).unverifiable_typed.format(n=plan.count)
    return str(plan.count)


def plan_table(plan: BulkPlan) -> Table:
    table = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, expand=False)
    for column in ("side effect", "state", "calls", "what will change"):
        table.add_column(column, no_wrap=column != "what will change", justify="right" if column == "calls" else "left")
    for side, state, n in plan.by_class_and_state():
        words, style = side_effect_words(side)
        table.add_row(Text(words, style), Text(state_label(state), state_style(state)), Text(f"{n:,}"),
                      Text(change_words(plan, state)))
    return table


def nothing_sent_words(plan: BulkPlan) -> str:
    """Why a bulk action would send nothing: said instead of asking for a count of zero."""
    n = len(plan.skipped)
    if n == 0:
        return "no call is selected."
    return ("the selected call would be skipped (see why above)." if n == 1
            else f"all {n:,} selected calls would be skipped (see why above).")


def plan_words(plan: BulkPlan, *, with_guard: bool = True) -> Group:
    """Everything the operator must see before typing the count: the blast radius (and the guard,
    unless the caller says it already). A plan that sends nothing says so first, never
    "cancel 0 calls"."""
    if not plan.send:
        skipped = Text()
        skipped.append(f"{words_of(plan.action).nothing}: ", style="bold yellow")
        skipped.append(f"{counted(len(plan.skipped), 'call')} will be skipped: " if plan.skipped
                       else "no call is selected.")
        skipped.append("; ".join(f"{n} — {why}" for why, n in plan.skipped_by_reason()))
        return Group(skipped)
    head = Text()
    head.append(f"{words_of(plan.action).bulk_verb.capitalize()} {counted(plan.count, 'call')}", style="bold")
    if "terminal_state" in plan.choices:
        head.append(f" as {plan.choices['terminal_state']}" + (" (force)" if plan.choices.get("force") else ""),
                    style="bold")
    if plan.unverifiable and plan.spec.confirm_unverifiable:
        head.append(words_of(plan.action).unverifiable_warning.format(n=plan.unverifiable), style="bold magenta")
    parts: list[Text | Table] = [head, plan_table(plan)]
    if plan.skipped:
        skipped = Text()
        skipped.append(f"{counted(len(plan.skipped), 'call')} will be skipped: ", style="bold yellow")
        skipped.append("; ".join(f"{n} — {why}" for why, n in plan.skipped_by_reason()))
        parts.append(skipped)
    if with_guard:
        parts.append(Text(guard_of(plan.action).plan, style="dim"))
    return Group(*parts)


def result_table(result: BulkResult, *, limit: int = 200) -> Table:
    table = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
                  title=f"batch {result.batch_id}", title_justify="left")
    for column in ("call", "outcome", "state now", "token", "why"):
        table.add_column(column, no_wrap=column != "why", overflow="fold")
    styles = {"applied": "bold green", "refused": "bold red", "failed": "bold yellow", "skipped": "yellow"}
    for o in sorted(result.outcomes, key=lambda o: (o.outcome == "applied", str(o.job_id)))[:limit]:
        table.add_row(Text(o.short_id, style="bold"), Text(o.outcome.upper(), styles[o.outcome]),
                      Text(state_label(o.state), state_style(o.state)), Text(str(o.fencing_token)),
                      t(o.why, max_chars=300))
    return table


def result_words(result: BulkResult) -> Text:
    text = Text()
    text.append(f"{result.count('applied')} applied", style="bold green")
    others: tuple[tuple[BulkOutcomeKind, str], ...] = (("refused", "bold red"), ("failed", "bold yellow"),
                                               ("skipped", "yellow"))
    for outcome, style in others:
        if result.count(outcome):
            text.append(f", {result.count(outcome)} {outcome}", style=style)
    text.append(f" — batch {result.batch_id} in the journal")
    return text


# ----------------------------------------------------------------------------- operations

OPERATION_STYLES = {"running": "bold cyan", "stopping": "bold yellow", "stopped": "bold magenta",
                    "finished": "bold green"}
OUTCOME_STYLES = {"applied": "bold green", "refused": "bold red", "failed": "bold yellow", "skipped": "yellow"}


def operation_question(plan: BulkPlan) -> str:
    """Said under the plan when it will run as an operation, before the count is typed."""
    why = (f"more than {LIMIT:,} calls" if plan.is_operation else "asked to run in the background")
    return (f"{why}: this runs as a bulk operation, in batches of 50 -- resumable after a crash (no call acted on "
            "twice, none skipped), stoppable with `leasectl bulk stop ID`, its progress in `leasectl bulk status ID` "
            "and the console (0).")


def what_it_does(op: BulkOperation) -> str:
    """"cancel 10,000 calls (tool:search state:running)"."""
    words = words_of(op.action)
    head = f"{words.bulk_verb} {counted(op.total, 'call')}"
    if op.choices.get("terminal_state"):
        head += f" as {op.choices['terminal_state']}" + (" (force)" if op.choices.get("force") else "")
    if op.filter:
        head += f" ({sanitize(op.filter, max_chars=120)})"
    return head


def state_words(op: BulkOperation) -> Text:
    text = Text(op.state.upper(), style=OPERATION_STYLES.get(op.state, "bold"))
    if op.state == "stopping":
        text.append(" — the batches in flight finish, no other begins", style="yellow")
    elif op.state == "stopped":
        text.append(f" — {counted(op.left, 'call')} never sent", style="magenta")
    elif op.state == "running" and (idle := op.idle_seconds()) is not None and idle >= 10:
        text.append(f" — no progress for {format_seconds(idle)}: `leasectl bulk resume {op.short_id}` works it here "
                    "(a supervisor takes it over by itself)", style="bold yellow")
    return text


def counts_words(op: BulkOperation) -> Text:
    text = Text()
    text.append(f"{op.done:,} of {op.total:,} done", style="bold")
    text.append(f" ({op.fraction:.0%})")
    text.append(" · ")
    text.append(f"{op.applied:,} applied", style="green")
    for n, word, style in ((op.refused, "refused", "red"), (op.failed, "failed", "yellow"),
                           (op.skipped, "skipped", "yellow")):
        if n:
            text.append(" · ")
            text.append(f"{n:,} {word}", style=style)
    rate = op.rate()
    if rate is not None:
        text.append(f" · {rate:,.0f} a second", style="dim")
    return text


def progress_line(op: BulkOperation) -> str:
    """One plain line of progress (a pipe, a log)."""
    return (f"operation {op.short_id}: {op.state}, {op.done:,} of {op.total:,} done ({op.fraction:.0%}): "
            f"{op.applied:,} applied, {op.refused:,} refused, {op.failed:,} failed")


def operation_panel(op: BulkOperation, not_applied: list[OperationCall] | None = None, *, limit: int = 20,
                    bar_width: int = 60) -> Group:
    """Everything about one operation: what it does, its state and progress, who started and who
    stopped it, the last error a worker met, the calls not applied (the first `limit`)."""
    head = Text()
    head.append(f"Bulk operation {op.id}\n", style="bold")
    does = what_it_does(op)
    head.append(does[:1].upper() + does[1:], style="bold")
    head.append("\n")
    progress = Table.grid()
    progress.add_column()
    progress.add_row(ProgressBar(total=max(op.total, 1), completed=op.done, width=bar_width))
    progress.add_row(counts_words(op))
    lines: list[Text | Table] = [head, Text.assemble("state: ", state_words(op)), progress]
    who = Text(style="dim")
    who.append(f"started by {sanitize(op.operator, max_chars=60)} (login {sanitize(op.db_role or '?', max_chars=60)}) "
               f"at {when(op.created_at)}: {sanitize(op.reason, max_chars=300)}")
    if op.background:
        who.append("; worked in the background (the supervisor)")
    if op.stop_requested_by:
        who.append(f"\nstop asked by {sanitize(op.stop_requested_by, max_chars=60)} at {when(op.stop_requested_at)}: "
                   f"{sanitize(op.stop_reason or '', max_chars=300)}")
    if op.finished_at:
        who.append(f"\n{op.state} at {when(op.finished_at)}")
    if op.worked_by:
        who.append(f"; last worked by {sanitize(op.worked_by, max_chars=80)}")
    lines.append(who)
    if op.error:
        lines.append(Text(f"last error met by a worker ({when(op.error_at)}): {sanitize(op.error, max_chars=400)} — "
                          "nothing of that batch was applied", style="bold red"))
    lines.append(Text(f"every call's journal row carries details.batch_id = {op.id}", style="dim"))
    if not_applied:
        lines.append(not_applied_table(not_applied[:limit], title=f"not applied ({op.not_applied:,})"))
    return Group(*lines)


def not_applied_table(calls: list[OperationCall], *, title: str = "not applied") -> Table:
    table = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, title=title,
                  title_justify="left")
    for column in ("call", "outcome", "as planned", "why"):
        table.add_column(column, no_wrap=column != "why", overflow="fold")
    for c in calls:
        table.add_row(Text(c.short_id, style="bold"), Text(c.outcome.upper(), OUTCOME_STYLES[c.outcome]),
                      Text(f"{state_label(c.seen_state)} #{c.seen_token}", state_style(c.seen_state)),
                      t(c.why or "", max_chars=300))
    return table


def operations_table(ops: list[BulkOperation]) -> Table:
    """The operations, one line each (at 80 columns what each does wraps, last)."""
    table = Table(show_header=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, expand=False)
    for column in ("operation", "state", "done", "not applied", "started"):
        table.add_column(column, no_wrap=True, justify="right" if column in ("done", "not applied") else "left")
    table.add_column("what, by whom", overflow="fold", min_width=20)
    for op in ops:
        what = Text()
        what.append_text(t(what_it_does(op), max_chars=120))
        what.append(f" — {sanitize(op.operator, max_chars=30)}", style="dim")
        table.add_row(Text(op.short_id, style="bold"), Text(op.state, OPERATION_STYLES.get(op.state, "")),
                      Text(f"{op.done:,}/{op.total:,}"),
                      Text(f"{op.not_applied:,}", "red" if op.not_applied else ""),
                      Text(op.created_at.astimezone(UTC).strftime("%m-%d %H:%M")), what)
    return table


def started_words(op: BulkOperation, *, here: bool) -> Text:
    text = Text()
    text.append(f"bulk operation {op.id} started: ", style="bold")
    text.append(what_it_does(op))
    if here:
        text.append(" — worked here in batches of 50; ctrl-c leaves it running (`leasectl bulk resume "
                    f"{op.short_id}` carries on; a supervisor takes it over by itself), `leasectl bulk stop "
                    f"{op.short_id}` stops it", style="dim")
    else:
        text.append(f" — the supervisor works it; `leasectl bulk status {op.short_id}` shows its progress, "
                    f"`leasectl bulk stop {op.short_id}` stops it", style="dim")
    return text


def ended_words(op: BulkOperation) -> Text:
    """The answer once an operation is worked as far as it goes here."""
    text = Text()
    if op.all_applied:
        text.append("DONE — ", style="bold green")
    elif op.over:
        text.append("NOT ALL APPLIED — ", style="bold red")
    else:
        text.append(f"{op.state.upper()} — ", style="bold yellow")
    text.append_text(counts_words(op))
    if op.state == "stopped":
        text.append(f" — stopped: {counted(op.left, 'call')} never sent", style="magenta")
    elif not op.over:
        text.append(" — batches still in flight elsewhere; `leasectl bulk status "
                    f"{op.short_id}` follows it", style="yellow")
    text.append(f" — operation {op.id} in the journal (details.batch_id)")
    return text
