"""Terminal output of ``build-dataset`` and ``query`` (rich tables)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from corefsearch.datasets.build import BuildSummary
    from corefsearch.pipeline import AdhocResult


def print_build_summary(summary: BuildSummary, console: Console) -> None:
    from rich.table import Table

    table = Table(title=f"Dataset {summary.out}")
    table.add_column("split")
    for column in ("clusters", "queries", "relevant pairs"):
        table.add_column(column, justify="right")
    for split, counts in summary.splits.items():
        table.add_row(split, f"{counts.clusters:,}", f"{counts.queries:,}", f"{counts.relevant_pairs:,}")
    table.caption = (f"{summary.documents:,} documents, {summary.passages:,} passages "
                     f"({summary.distractor_passages:,} distractors), {summary.mentions:,} mentions in "
                     f"{summary.clusters:,} clusters; clusters with queries = clusters in ≥ 2 passages")
    console.print(table)


def highlight(text: str, spans: list[tuple[int, int]], style: str = "bold yellow") -> object:
    from rich.text import Text

    rendered = Text(text)
    for start, end in spans:
        rendered.stylize(style, start, end)
    return rendered


def print_adhoc_result(result: AdhocResult, console: Console) -> None:
    from rich.table import Table

    query = result.query
    note = (f" (occurrence at character {query.start}; it occurs {result.occurrences} times, "
            "choose with --occurrence)" if result.occurrences > 1 else "")
    console.print(f"Query mention: [bold]{query.mention}[/bold]{note}", highlight=False)
    console.print(f"BM25 query: {result.query_string}", highlight=False)
    table = Table(show_lines=True)
    table.add_column("rank", justify="right")
    table.add_column("score", justify="right")
    table.add_column("passage")
    table.add_column("title")
    table.add_column("text", ratio=1)
    for hit in result.hits:
        table.add_row(str(hit.rank), f"{hit.score:.3f}", hit.passage_id, hit.title,
                      highlight(hit.text, hit.matched))  # type: ignore[arg-type]
    if not result.hits:
        console.print("No passage matches.")
    else:
        console.print(table)
