"""What the commands print on stdout: the tables and summary lines of every command, in one place."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from corefsearch.base.counts import counted

if TYPE_CHECKING:
    from rich.console import Console

    from corefsearch.base.shipped import ShippedModel
    from corefsearch.datasets.build import BuildSummary
    from corefsearch.dense.indexing import DenseIndexSummary
    from corefsearch.search.engine import AdhocResult
    from corefsearch.sparse.index import IndexSummary
    from corefsearch.training import TrainingSummary


def print_build_summary(summary: BuildSummary, console: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    if not summary.mentions:  # plain documents: no clusters, queries or qrels to count by split
        console.print(f"Dataset {summary.out}: {counted(summary.documents, 'document')}, "
                      f"{counted(summary.passages, 'passage')}, no mentions (find them with `corefsearch detect`).",
                      highlight=False, markup=False)
        return
    table = Table(title=Text(f"Dataset {summary.out}"))
    table.add_column("split")
    for column in ("clusters", "queries", "relevant pairs"):
        table.add_column(column, justify="right")
    for split, counts in summary.splits.items():
        table.add_row(split, f"{counts.clusters:,}", f"{counts.queries:,}", f"{counts.relevant_pairs:,}")
    console.print(table)
    console.print(f"{counted(summary.documents, 'document')}, {counted(summary.passages, 'passage')} "
                  f"({counted(summary.distractor_passages, 'distractor')}), {counted(summary.mentions, 'mention')} "
                  f"in {counted(summary.clusters, 'cluster')}. Queries come from the clusters whose mentions lie in "
                  "at least two passages.", highlight=False)
    if summary.mentions_dropped:
        console.print(f"{counted(summary.mentions_dropped, 'mention')} crossed a passage boundary and "
                      f"{'was' if summary.mentions_dropped == 1 else 'were'} left out.")


def print_statistics_check(rows: list[tuple[str, str, int, int | None]], folder: Path, console: Console) -> None:
    """What was read against the corpus's own ``statistics`` file (cdcr-json), one row per count."""
    if not rows:
        return
    from rich.table import Table

    table = Table(title=f"Counts read, against {folder / 'statistics'}")
    for column, justify in (("split", "left"), ("quantity", "left"), ("read", "right"), ("statistics", "right"),
                            ("", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for split, quantity, read, published in rows:
        mark = "" if published is None else ("same" if read == published else "DIFFERS")
        table.add_row(split, quantity, f"{read:,}", "—" if published is None else f"{published:,}", mark)
    console.print(table)
    differing = sum(1 for *_, read, published in rows if published is not None and read != published)
    console.print(f"{len(rows) - differing} of {counted(len(rows), 'count')} as the corpus's statistics file gives "
                  "them" + (f"; {differing} {'differs' if differing == 1 else 'differ'}" if differing else ""),
                  highlight=False)


def print_index_summary(summary: IndexSummary | DenseIndexSummary, console: Console) -> None:
    _print_index_lines(summary, console)
    if getattr(summary, "ray_workers", None):
        console.print(f"Encoded on Ray by {summary.ray_workers} workers; their shards are in "  # type: ignore[union-attr]
                      f"{summary.path.parent / 'dense-shards'} (`--merge-shards {summary.ray_workers} --faiss TYPE` "
                      "builds another FAISS type from them without encoding again)", markup=False, soft_wrap=True)


def _print_index_lines(summary: IndexSummary | DenseIndexSummary, console: Console) -> None:
    from corefsearch.dense.indexing import DenseIndexSummary

    if not isinstance(summary, DenseIndexSummary):
        console.print(f"Indexed {counted(summary.passages, 'passage')} into {summary.path} in {summary.seconds:.1f} s "
                      f"({summary.passages_per_second:,.0f} passages/s)", markup=False)
        return
    if summary.merged_shards is not None:
        console.print(f"Merged {counted(summary.merged_shards, 'shard')} ({counted(summary.passages, 'passage')}, "
                      f"{summary.dimension}-d) into {summary.path} ({summary.faiss_type}) in {summary.seconds:.1f} s",
                      markup=False)
        return
    resumed = f"; {summary.resumed:,} taken from an interrupted run" if summary.resumed else ""
    speed = f" ({summary.passages_per_second:,.1f} passages/s)" if summary.encoded else ""
    console.print(f"Encoded {counted(summary.encoded, 'passage')} in {summary.encode_seconds:.1f} s{speed}{resumed}",
                  markup=False)
    if summary.shard is None:
        console.print(f"Wrote {summary.path} ({summary.faiss_type}, {counted(summary.passages, 'passage')}, "
                      f"{summary.dimension}-d) in {summary.seconds:.1f} s", markup=False)
        return
    index, count = summary.shard
    console.print(f"Wrote shard {index}/{count} ({counted(summary.passages, 'passage')}) to {summary.path}; "
                  f"{summary.shards_present} of {counted(count, 'shard')} {'is' if count == 1 else 'are'} complete",
                  markup=False)
    if summary.shards_present == count:
        console.print(f"All shards are there: build the index with `corefsearch index DATASET --dense "
                      f"--out {summary.path.parent.parent} --merge-shards {count} [--faiss flat|hnsw|ivfpq]`",
                      markup=False)


def highlight(text: str, spans: list[tuple[int, int]], style: str = "bold yellow") -> object:
    from rich.text import Text

    rendered = Text(text)
    for start, end in spans:
        rendered.stylize(style, start, end)
    return rendered


GOLD_OPEN, GOLD_CLOSE = "⟦", "⟧"  # around a gold coreferring mention (kept when the output has no colours)
GOLD_STYLE = "bold green"
RELEVANT_MARK = "✓"


def marked_text(text: str, styled: list[tuple[int, int, str]], gold: list[tuple[int, int]]) -> object:
    """``text`` with styled spans, and each ``gold`` span put between ⟦ ⟧ (the other spans moved along)."""
    from rich.text import Text

    marks = sorted(gold)

    def moved(position: int, closing: bool) -> int:
        # each gold edge adds one character; one at `position` comes before a span's start, after its end
        edges = [edge for start, end in marks for edge in (start, end)]
        return position + sum(1 for edge in edges if edge < position or (edge == position and not closing))

    rendered = Text()
    cursor = 0
    for start, end in marks:
        rendered.append(text[cursor:start])
        rendered.append(GOLD_OPEN + text[start:end] + GOLD_CLOSE, style=GOLD_STYLE)
        cursor = end
    rendered.append(text[cursor:])
    for start, end, style in styled:
        rendered.stylize(style, moved(start, closing=False), moved(end, closing=True))
    return rendered


def print_adhoc_result(result: AdhocResult, console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    query = result.query
    note = (f" (occurrence at character {query.start}; it occurs {result.occurrences} times, "
            "choose with --occurrence)" if result.occurrences > 1 else "")
    console.print(f"Query mention: [bold]{escape(query.mention)}[/bold]{note}", highlight=False)
    judged = result.split is not None
    if judged:
        found = sum(1 for hit in result.hits if hit.relevant)
        console.print(Text(f"Query {query.id} ({result.split} split, cluster {query.cluster_id}, passage "
                           f"{query.passage_id}): ") + marked_text(query.text, [], [(query.start, query.end)]))
        console.print(Text(f"{found} of the {counted(len(result.hits), 'hit')} {'is' if found == 1 else 'are'} "
                           f"relevant ({RELEVANT_MARK}); the qrels hold "
                           f"{counted(result.relevant_total, 'relevant passage')}. {GOLD_OPEN}…{GOLD_CLOSE}: the "
                           "mentions of the query's cluster."))
    if result.query_string is not None:
        console.print(Text(f"BM25 query: {result.query_string}"))
    if result.encoder is not None:
        fusion = f", fused with BM25 by {result.fusion}" if result.fusion else ""
        console.print(Text(f"Dense encoder: {result.encoder}{fusion}"))
    if result.reader is not None:
        scores = ("reciprocal rank fusion of the reader's and the retriever's ranks" if result.rerank_fusion == "rrf"
                  else "the reader's")
        console.print(Text(f"Reader: {result.reader} (scores are {scores}; the coreferring span is underlined)"))
    table = Table(show_lines=True)
    table.add_column("rank", justify="right")
    if judged:
        table.add_column(RELEVANT_MARK, justify="center")
    table.add_column("score", justify="right")
    table.add_column("passage")
    table.add_column("title")
    table.add_column("text", ratio=1)
    digits = 5 if result.fusion == "rrf" and result.reader is None else 3  # reciprocal-rank scores are small
    for hit in result.hits:
        styled = [(start, end, "bold yellow") for start, end in hit.matched]
        if hit.span is not None:
            styled.append((*hit.span, "bold underline magenta"))
        text = marked_text(hit.text, styled, hit.gold_mentions)
        mark = [RELEVANT_MARK if hit.relevant else ""] if judged else []
        table.add_row(str(hit.rank), *mark, f"{hit.score:.{digits}f}", Text(hit.passage_id), Text(hit.title),
                      text)  # type: ignore[arg-type]
    if not result.hits:
        console.print("No passage matches.")
    else:
        console.print(table)
    if result.expansion is not None:
        shown = ", ".join(f"{x['mention']!r} ({x['passage_id']})" for x in result.expansion["queries"]) or "none"
        expansion = result.expansion
        where = ("the reader's spans" if expansion.get("candidates") == "reader" else
                 f"the mention encoder's choice among {expansion.get('candidates')} mentions")
        console.print(f"Second round from {where} in the top {expansion['expand']}: {shown}", markup=False,
                      highlight=False)
        if expansion.get("note"):
            console.print(f"Note: {expansion['note']}", style="yellow", markup=False, highlight=False)
    if result.cluster is not None:
        print_answer_cluster(result.cluster, console)


def print_answer_cluster(cluster: dict[str, Any], console: Console) -> None:
    """``query --cluster``: the query mention's cluster, document by document, then the near misses."""
    from rich.text import Text

    console.print(f"The query mention's cluster: {counted(cluster['size'], 'mention')} (each hit's best candidate "
                  f"at a score of {cluster['threshold']:g} or more)", markup=False, highlight=False)
    for document in cluster["documents"]:
        console.print(Text(f"  {document['doc_id'] or '(document unknown)'}: {document['title']}", style="bold"))
        for mention in document["mentions"]:
            console.print(Text(f"    #{mention['rank']} {mention['passage_id']} {mention['mention']!r} "
                               f"(score {mention['score']:.3f})"))
    if cluster["near_misses"]:
        console.print("Near misses: " + "; ".join(f"#{m['rank']} {m['passage_id']} {m['mention']!r} ({m['score']:.3f})"
                                                  for m in cluster["near_misses"]), markup=False, highlight=False)
    if cluster.get("note"):
        console.print(f"Note: {cluster['note']}", style="yellow", markup=False, highlight=False)


def print_cluster_summary(summary: Any, scope: str, console: Console) -> None:
    wrote = f"{summary.out}" + (f" and {summary.conll}" if summary.conll is not None else "")
    at = f" at τ {summary.threshold:g}" if summary.threshold is not None else ""
    if summary.lemma_weight:
        at += f", lemma weight β {summary.lemma_weight:g}"
        if getattr(summary, "evidence", None) == "lemma-heuristic":
            at += f" on the pairs lemma-heuristic links (J {summary.sentence_overlap:g})"
    stages = (" (" + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in summary.stages.items()) + ")"
              if summary.stages else "")
    if getattr(summary, "pairs_total", None) is not None:
        at += (f" at sentence overlap J {summary.sentence_overlap:g} (linked {summary.pairs_kept:,} of "
               f"{counted(summary.pairs_total, 'pair')} within groups and types)")
    if getattr(summary, "pair_clustering", None):
        at += f" ({summary.pair_clustering})"
    if summary.encoded is not None and summary.encoded < summary.mentions:
        stages += f"; {counted(summary.encoded, 'distinct encoder input')} (identical copies encoded once)"
    if getattr(summary, "backend", None) not in (None, "torch"):
        stages += f"; the encoder ran on {summary.backend}"
    mentions = counted(summary.mentions, "mention")
    if getattr(summary, "mention_kind", "gold") == "predicted":
        mentions = (f"{counted(summary.mentions, 'predicted mention')} (detector {summary.detector or 'unnamed'}, "
                    f"--split {summary.split})")
    console.print(f"Clustered {mentions} into {counted(summary.clusters, 'cluster')} "
                  f"({counted(summary.groups, 'group')} of --scope {scope}){at} in {summary.seconds:.1f} s{stages}; "
                  f"wrote {wrote}", markup=False)
    agreements = [f"{name}: {found.line()}" for name, found in
                  (("gold topics", getattr(summary, "topic_agreement", None)),
                   ("gold subtopics", getattr(summary, "subtopic_agreement", None))) if found is not None]
    if agreements:
        console.print("Document groups against the " + "; against the ".join(agreements), markup=False)


def print_add_summary(summary: Any, console: Console) -> None:
    console.print(f"Added {counted(summary.documents, 'document')} ({counted(summary.passages, 'passage')}, "
                  f"{counted(summary.mentions, 'mention')}) to {summary.dataset}: "
                  f"{counted(summary.total_passages, 'passage')} now; {counted(summary.new_queries, 'new query')}, "
                  f"{counted(summary.changed_queries, 'query')} with new relevant passages, "
                  f"{counted(summary.new_clusters, 'new cluster')} ({summary.seconds:.1f} s)", markup=False)
    if summary.predicted_mentions is not None:
        console.print(f"  predicted mentions: +{summary.predicted_mentions:,} (the dataset's detector on the new "
                      "passages)", markup=False)
    for line in summary.indexes:
        console.print(f"  index {line}", markup=False)
    for line in getattr(summary, "read", []):
        console.print(f"  {line}", markup=False, highlight=False)


def print_export_summary(summary: Any, model_dir: Path, out: Path | None, console: Console) -> None:
    for removed in summary.removed:
        console.print(f"Removed {removed} (from an earlier export; --no-quantize writes none)", markup=False,
                      soft_wrap=True)
    for file in summary.files:
        console.print(f"Wrote {file.path} ({file.megabytes:.1f} MB; max abs difference of the hidden states to "
                      f"torch: {file.max_abs_diff:.2e})", markup=False, soft_wrap=True)
    console.print(f"Exported in {summary.seconds:.1f} s", markup=False)
    if out is not None:
        console.print(f"Pass --encoder {out} with --backend onnx|onnx-int8 (it encodes as {model_dir} does: an index "
                      f"built with {model_dir} is searched with it as it is)", markup=False, soft_wrap=True)


def print_search_summary(summary: Any, console: Console) -> None:
    console.print(f"Searched {counted(summary.queries, 'query')} in {summary.seconds:.1f} s "
                  f"({summary.queries_per_second:,.0f} queries/s); wrote {counted(summary.rows, 'line')} to "
                  f"{summary.out}", markup=False)


# --- train retriever | reader | clusterer ----------------------------------------------------------------------


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def _tau(value: float | None) -> str:
    return "–" if value is None else f"{value:g}"


def _dev_columns(kind: str) -> tuple[str, str, list[tuple[str, str, Any]]]:
    """A trainer's dev curve table: its title, the label of epoch 0 and its metric columns
    ``(header, dev curve key, format)``."""
    if kind == "retriever":
        from corefsearch.dense.train import DEV_METRICS

        return "Retriever", "0", [(metric, metric, _number) for metric in DEV_METRICS]
    if kind == "reader":
        from corefsearch.reader.train import RETRIEVER_METRIC, RRF_METRIC, SELECTION_METRIC

        return "Reader", "untrained", [(SELECTION_METRIC, SELECTION_METRIC, _number), (RRF_METRIC, RRF_METRIC, _number),
                                       ("retriever", RETRIEVER_METRIC, _number)]
    if kind == "detector":
        return "Detector", "0", [(name, name, _number) for name in ("mention F1", "P", "R", "event F1", "entity F1")]
    if kind == "pair-scorer":
        return "Pair scorer", "untrained", [("dev pair F1", "pair F1", _number), ("p >", "pair threshold", _tau)]
    from corefsearch.cluster.train import SELECTION_METRIC as CONLL

    return "Mention encoder", "untrained", [(CONLL, CONLL, _number), ("τ", "threshold", _tau)]


def print_training_summary(summary: TrainingSummary[Any], console: Console) -> None:
    """The dev curve as a table (the kept epoch starred), then what was trained, how fast, what was
    kept and where it went; for a reader the fusion it recorded."""
    from rich.table import Table
    from rich.text import Text

    title, epoch0, metrics = _dev_columns(summary.kind)
    if summary.dev_curve:
        table = Table(title=Text(f"{title} {summary.out}"))
        for column in ("epoch", "step", "loss", *(header for header, _, _ in metrics), "seconds"):
            table.add_column(column, justify="right")
        for entry in summary.dev_curve:
            label = epoch0 if entry["epoch"] == 0 else str(entry["epoch"])
            table.add_row(label + (" *" if entry["epoch"] == summary.best_epoch else ""), f"{entry['step']:,}",
                          _number(entry.get("loss")), *(show(entry.get(key)) for _, key, show in metrics),
                          f"{entry.get('seconds', 0):.0f}")
        console.print(table)
    extras = summary.extras
    speed = f"; {summary.seconds_per_step:.2f} s/step on {summary.device}" if summary.seconds_per_step else ""
    resumed = (f" (resumed from step {summary.resumed_from_step:,})" if summary.resumed_from_step is not None else "")
    kept = ("the starting weights (no epoch beat them on dev)" if summary.best_epoch == 0
            else f"epoch {summary.best_epoch}" if summary.best_epoch is not None else "the last epoch")
    if summary.kind == "retriever":
        trained_on = (f"{counted(extras.train_queries, 'query')} "
                      f"({counted(extras.examples_per_epoch, 'example')} per epoch)")
    elif summary.kind == "reader":
        trained_on = counted(extras.train_queries, "query")
    elif summary.kind == "detector":
        trained_on = counted(extras.train_passages, "annotated passage")
    elif summary.kind == "pair-scorer":
        trained_on = f"{counted(extras.train_pairs, 'pair')} of {counted(extras.train_mentions, 'mention')}"
        kept += (f", {extras.linkage} linkage at p > {extras.threshold:g} (dev CoNLL F1 {extras.dev_conll:.4f})"
                 if extras.threshold is not None else ", no threshold (no dev clusters)")
    else:
        mentions = counted(extras.train_mentions, "mention")
        trained_on = (f"{counted(extras.train_pairs, 'pair')} of {mentions}" if extras.train_pairs
                      else f"topic batches of {mentions}")
        kept += f", τ {extras.threshold:g}" if extras.threshold is not None else ", no τ (no dev clusters)"
    console.print(Text(f"Trained {counted(summary.total_steps, 'step')}{resumed} on {trained_on}{speed}. Kept {kept}; "
                       f"wrote {summary.out}."))
    if summary.kind == "reader":
        _print_fusion(extras.fusion, extras.fusion_dev, console)


def _print_fusion(fusion: str, dev: dict[str, float] | None, console: Console) -> None:
    from rich.text import Text

    from corefsearch.reader.train import SELECTION_METRIC

    if dev is not None:
        console.print(Text(f"Fusion: {fusion} (dev {SELECTION_METRIC} {dev['reader']:.4f} by the reader's "
                           f"score alone, {dev['rrf']:.4f} fused with the run's ranks by RRF); `search --reader` "
                           "uses it unless --rerank-fusion says otherwise."))
    else:
        console.print(Text(f"Fusion: {fusion} (no dev queries to choose by); `search --reader` uses it "
                           "unless --rerank-fusion says otherwise."))


def _scores(values: dict[str, float]) -> str:
    return ", ".join(f"{metric} {value:g}" for metric, value in values.items()) or "—"


def print_shipped_models(models: list[ShippedModel], console: Console) -> None:
    """``corefsearch models``: one row per shipped model, its card's scores compactly."""
    from rich.table import Table

    table = Table(title="Shipped models (pass a name to any model option)")
    for column, justify in (("name", "left"), ("kind", "left"), ("type", "left"), ("MB", "right"),
                            ("dev", "left"), ("test", "left"), ("card", "left")):
        table.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for model in models:
        table.add_row(model.name, model.kind, model.mention_type or "—", f"{model.size_bytes / 1e6:.1f}",
                      _scores(model.scores.get("dev", {})), _scores(model.scores.get("test", {})),
                      str(model.card_path))
    console.print(table)
