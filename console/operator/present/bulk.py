"""A bulk action in words: what it will touch (by side-effect class and state, what changes for
each, what is skipped and why, the guard), and afterwards a line per call."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from console.core.bulk import BulkOutcomeKind, BulkPlan, BulkResult
from console.operator.present.actions import guard_of, words_of
from console.operator.present.words import side_effect_words, state_label, state_style, t
from console.shared.text import counted


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
        table.add_row(Text(words, style), Text(state_label(state), state_style(state)), Text(str(n)),
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
