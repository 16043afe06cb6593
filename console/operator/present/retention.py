"""Words of `leasectl admin retention`: the plan it asks about, a line per month it archived, and
what the run left (console/operator/retention.py does it)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from console.core.retention import Month, MonthResult, RetentionReport
from console.shared.text import counted, sanitize


def plan_table(months: list[Month], files: list[str], directory: Path, cutoff: datetime) -> Table:
    table = Table(title=f"history older than {cutoff:%Y-%m-%d %H:%M} UTC: whole months to archive, then drop",
                  title_justify="left", show_header=True, header_style="bold", expand=False)
    table.add_column("month")
    table.add_column("events (estimated)", justify="right")
    table.add_column("archive file", overflow="fold")
    for month, name in zip(months, files, strict=True):
        estimate = "not counted yet" if month.estimated_rows is None else f"~{month.estimated_rows:,}"
        table.add_row(f"{month.month:%Y-%m}", estimate, escape(sanitize(str(directory / name), max_chars=300)))
    return table


def month_line(result: MonthResult) -> str:
    digest = (result.sha256 or "")[:12]
    return (f"[green]archived[/] {result.month}  {counted(result.rows, 'event')}  {escape(result.file)}  "
            f"sha256 {digest}…  verified, then dropped")


def summary(report: RetentionReport) -> str:
    if not report.months:
        return "nothing archived"
    begins = (f"; the history online begins {report.archived_before:%Y-%m-%d %H:%M} UTC"
              if report.archived_before else "")
    return (f"{counted(len(report.months), 'month')} archived to {escape(sanitize(report.archive, max_chars=300))} "
            f"and dropped{begins} (`leasectl audit verify --archive DIR` checks them)")
