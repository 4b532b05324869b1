"""Terminal output of ``build-dataset`` and ``query`` (rich tables)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from corefsearch.datasets.build import BuildSummary
    from corefsearch.pipeline import AdhocResult


def print_build_summary(summary: BuildSummary, console: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(f"Dataset {summary.out}"))
    table.add_column("split")
    for column in ("clusters", "queries", "relevant pairs"):
        table.add_column(column, justify="right")
    for split, counts in summary.splits.items():
        table.add_row(split, f"{counts.clusters:,}", f"{counts.queries:,}", f"{counts.relevant_pairs:,}")
    console.print(table)
    console.print(f"{summary.documents:,} documents, {summary.passages:,} passages "
                  f"({summary.distractor_passages:,} distractors), {summary.mentions:,} mentions in "
                  f"{summary.clusters:,} clusters. Queries come from the clusters whose mentions lie in "
                  "at least two passages.", highlight=False)
    if summary.mentions_dropped:
        console.print(f"{summary.mentions_dropped:,} mentions crossed a passage boundary and were left out.")


def highlight(text: str, spans: list[tuple[int, int]], style: str = "bold yellow") -> object:
    from rich.text import Text

    rendered = Text(text)
    for start, end in spans:
        rendered.stylize(style, start, end)
    return rendered


def print_adhoc_result(result: AdhocResult, console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    query = result.query
    note = (f" (occurrence at character {query.start}; it occurs {result.occurrences} times, "
            "choose with --occurrence)" if result.occurrences > 1 else "")
    console.print(f"Query mention: [bold]{escape(query.mention)}[/bold]{note}", highlight=False)
    console.print(Text(f"BM25 query: {result.query_string}"))
    table = Table(show_lines=True)
    table.add_column("rank", justify="right")
    table.add_column("score", justify="right")
    table.add_column("passage")
    table.add_column("title")
    table.add_column("text", ratio=1)
    for hit in result.hits:
        table.add_row(str(hit.rank), f"{hit.score:.3f}", Text(hit.passage_id), Text(hit.title),
                      highlight(hit.text, hit.matched))  # type: ignore[arg-type]
    if not result.hits:
        console.print("No passage matches.")
    else:
        console.print(table)
