"""``build-dataset`` and ``add``: datasets from corpora, and documents added to a dataset and its indexes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from corefsearch.base.errors import CorefSearchError
from corefsearch.base.precision import DEFAULT_PRECISION, PRECISION_HELP
from corefsearch.cli.app import app, console, log_line, user_errors
from corefsearch.cli.fields import options_from
from corefsearch.cli.options import option_of, precision_scope
from corefsearch.cli.report import print_add_summary
from corefsearch.datasets.build import BuildOptions
from corefsearch.datasets.sources import SourceOptions
from corefsearch.search.backends import AppendOptions
from corefsearch.search.backends.dense import DenseIndexOptions
from corefsearch.search.backends.lucene import LuceneIndexOptions


def _floats(text: str, option: str) -> tuple[float, ...]:
    try:
        numbers = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise CorefSearchError(f"{option} takes comma-separated numbers, got {text!r}") from None
    if not all(math.isfinite(number) for number in numbers):
        raise CorefSearchError(f"{option} takes finite numbers, got {text!r}")
    return numbers



def _listed(name: str) -> str:
    """The default of the tuple field ``name`` of :class:`BuildOptions`, comma-separated as the option takes it."""
    return ",".join(str(value) for value in BuildOptions.__dataclass_fields__[name].default)


@dataclass
class BuildArgs:
    """The options of ``build-dataset``: how the corpus is read (:class:`SourceOptions`) and how the dataset is made
    (:class:`BuildOptions`; its tuples comma-separated)."""

    source_format: str = field(metadata={"option": "--format", "help": (
        "ecbplus | wec | coresearch | generic | cdcr-json (a folder of {split}_text.txt and "
        "{split}_{event,entity}_gold_mentions.json) | conll (a CoNLL coreference file or a folder of them; where two "
        "files name the same document, document ids become FILE/NAME) | text "
        "(plain documents without mentions: a folder of .txt/.md files, sub-folders too; a .csv/.tsv/.jsonl table "
        "of texts; or a corpus.jsonl)")})
    out: Path = field(metadata={"option": "--out", "help": "Dataset directory to write."})
    mention_type: str | None = option_of(SourceOptions, "mention_type")
    validated_only: bool = option_of(SourceOptions, "validated_only")
    sentences_csv: Path | None = option_of(SourceOptions, "sentences_csv")
    chains: str | None = option_of(SourceOptions, "chains")
    title: str | None = option_of(SourceOptions, "title")
    text_field: str | None = option_of(SourceOptions, "text_field")
    id_field: str | None = option_of(SourceOptions, "id_field")
    title_field: str | None = option_of(SourceOptions, "title_field")
    passage: str = option_of(BuildOptions, "passage")
    window: int = option_of(BuildOptions, "window")
    split_ratios: str = option_of(BuildOptions, "split_ratios", default=_listed("split_ratios"))
    seed: int = option_of(BuildOptions, "seed")
    split_by: str | None = option_of(SourceOptions, "split_by")
    sentences: str | None = option_of(SourceOptions, "sentences")
    splits: str = option_of(BuildOptions, "splits", default=_listed("splits"))
    distractors: list[Path] | None = field(default=None, metadata={
        "help": "JSONL of passages without mentions ({doc_id, title?, text}); repeatable."})
    overwrite: bool = field(default=False, metadata={"help": "Replace an existing dataset directory."})


@app.command("build-dataset")
@user_errors
@options_from(BuildArgs)
def build_dataset_command(
    input_path: Annotated[Path, typer.Argument(metavar="INPUT", help="Corpus file or folder.")],
    *,
    args: BuildArgs,
) -> None:
    """Turn a coreference corpus into a coreference-search dataset (passages, queries, qrels)."""
    from corefsearch.cli.report import print_build_summary, print_statistics_check
    from corefsearch.datasets.build import build_dataset
    from corefsearch.datasets.cdcr_json import CdcrReport, statistics_rows
    from corefsearch.datasets.conll import ConllReport
    from corefsearch.datasets.sources import plain_source, read_source
    from corefsearch.datasets.text import TextReport

    source_format = args.source_format
    kept_splits = tuple(s.strip() for s in args.splits.split(",") if s.strip())
    source_options = SourceOptions(args.mention_type, args.validated_only, args.sentences_csv, args.passage,
                                   kept_splits, sentences=args.sentences, split_by=args.split_by, chains=args.chains,
                                   title=args.title, text_field=args.text_field, id_field=args.id_field,
                                   title_field=args.title_field)
    ratios = _floats(args.split_ratios, "--split-ratios")
    options = BuildOptions(passage=args.passage, window=args.window, split_ratios=ratios,  # type: ignore[arg-type]
                           seed=args.seed, splits=kept_splits,
                           source={"format": source_format, "input": str(input_path),
                                   **source_options.resolved(source_format), "validated_only": args.validated_only,
                                   "distractors": [str(p) for p in args.distractors or []]})
    options.validate()
    report, text_report, conll_report = CdcrReport(), TextReport(), ConllReport()
    documents = read_source(source_format, input_path, source_options, report=report, text_report=text_report,
                            conll_report=conll_report)
    plain = plain_source(source_format, input_path)  # no gold mentions: recorded, and said in one line
    options.source["mentions"] = "none" if plain else "gold"
    if plain:  # filled as the documents are read, so the manifest (written after) records how they were
        options.source["read"] = text_report.record_dict
    summary = build_dataset(documents, args.out, options, distractors=args.distractors or [],
                            overwrite=args.overwrite, source_name=str(input_path))
    if plain:
        log_line(plain)
    print_build_summary(summary, console)
    for line in text_report.lines() + conll_report.lines():
        console.print(line, highlight=False, markup=False)
    if source_format == "cdcr-json":
        print_statistics_check(statistics_rows(input_path, report), input_path, console)



@dataclass
class AddArgs:
    """The options of ``add``: the new documents, the indexes that take them and how (:class:`AppendOptions`;
    ``--batch-size`` and ``--threads`` those of ``index``)."""

    corpus: Path = field(metadata={"option": "--corpus", "help": (
        "The new documents, as build-dataset reads them: a folder holding corpus.jsonl (and mentions.jsonl if they "
        "have mentions; the generic format), or plain documents as --format text reads them (a folder of .txt/.md "
        "files, sub-folders too; a .csv/.tsv/.jsonl table), titles and columns taken as the dataset's were.")})
    title: str | None = field(default=None, metadata={"help": (
        "Plain text files: auto | first-line | none (default: as the dataset's documents were read; see "
        "build-dataset).")})
    text_field: str | None = option_of(SourceOptions, "text_field")
    id_field: str | None = option_of(SourceOptions, "id_field")
    title_field: str | None = option_of(SourceOptions, "title_field")
    index: list[Path] | None = field(default=None, metadata={"option": "--index", "metavar": "INDEX", "help": (
        "Index directory built from DATASET (its lucene/ and dense/ take the new passages); repeatable. Indexes not "
        "named no longer match the dataset.")})
    encoder: str | None = option_of(AppendOptions, "encoder")
    device: str = option_of(AppendOptions, "device")
    precision: str = field(default=DEFAULT_PRECISION, metadata={"help": PRECISION_HELP})
    batch_size: int | None = option_of(DenseIndexOptions, "batch_size", default=None)  # None: by device
    threads: int = option_of(LuceneIndexOptions, "threads")


@app.command("add")
@user_errors
@options_from(AddArgs)
def add_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset, to grow.")],
    *,
    args: AddArgs,
) -> None:
    """Append new documents to a dataset and its indexes without a rebuild (all switched in at the end)."""
    from corefsearch.datasets.text import TextOptions
    from corefsearch.dense.encoder import resolve_batch_size
    from corefsearch.search.add import add_documents

    text_options = TextOptions(args.title, args.text_field, args.id_field, args.title_field)
    text_options.check()
    with precision_scope(args.precision):
        summary = add_documents(dataset, args.corpus, args.index or [], encoder=args.encoder, device=args.device,
                                batch_size=resolve_batch_size(args.batch_size, args.device), threads=args.threads,
                                text_options=text_options)
    print_add_summary(summary, console)
