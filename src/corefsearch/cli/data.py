"""``build-dataset`` and ``add``: datasets from corpora, and documents added to a dataset and its indexes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from corefsearch.base.errors import CorefSearchError
from corefsearch.cli.app import app, console, log_line, user_errors
from corefsearch.cli.options import EncodeBatchOption, PrecisionOption, encode_batch_size, precision_scope
from corefsearch.cli.report import print_add_summary


def _floats(text: str, option: str) -> tuple[float, ...]:
    try:
        numbers = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise CorefSearchError(f"{option} takes comma-separated numbers, got {text!r}") from None
    if not all(math.isfinite(number) for number in numbers):
        raise CorefSearchError(f"{option} takes finite numbers, got {text!r}")
    return numbers



@app.command("build-dataset")
@user_errors
def build_dataset_command(
    input_path: Annotated[Path, typer.Argument(metavar="INPUT", help="Corpus file or folder.")],
    source_format: Annotated[str, typer.Option(
        "--format", help="ecbplus | wec | coresearch | generic | cdcr-json (a folder of {split}_text.txt and "
                         "{split}_{event,entity}_gold_mentions.json) | conll (a CoNLL coreference file or a "
                         "folder of them) | text (plain documents without mentions: a folder of .txt files, the "
                         "title on the first line, or a corpus.jsonl)")],
    out: Annotated[Path, typer.Option("--out", help="Dataset directory to write.")],
    mention_type: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="event | entity | all: the mentions kept (ecbplus, generic, cdcr-json; wec and coresearch hold "
             "events only; conll: the type of its mentions, event or entity). Default: event, for generic all.")
    ] = None,
    validated_only: Annotated[bool, typer.Option(
        "--validated-only", help="ECB+: keep only the validated sentences of ECBplus_coreference_sentences.csv."
    )] = False,
    sentences_csv: Annotated[Optional[Path], typer.Option(  # noqa: UP045 (Typer needs Optional on 3.10)
        help="ECB+: the validated-sentences CSV (default: beside INPUT).")] = None,
    chains: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="ECB+: the gold mentions kept: cross-document (those of CROSS_DOC_COREF chains; default) | all "
             "(also intra-document chains and singletons, as coreference scoring needs).")] = None,
    passage: Annotated[str, typer.Option(help="Passage unit: sentence | window | document.")] = "sentence",
    window: Annotated[int, typer.Option(help="Sentences per passage with --passage window.")] = 3,
    split_ratios: Annotated[str, typer.Option(
        help="train,dev,test shares of clusters (with --split-by clusters).")] = "0.8,0.1,0.1",
    seed: Annotated[int, typer.Option(help="Seed of the cluster split.")] = 13,
    split_by: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="clusters (a seeded shuffle of the clusters by --split-ratios; default for wec, generic, conll) | "
             "corpus (each document's own split: ecbplus, coresearch, cdcr-json, generic documents with a 'split' "
             "field, and conll files named train…, dev…/val…, test…).")
    ] = None,
    sentences: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="generic, text: how text is cut into sentences: spacy (spaCy's sentencizer within each line; default) "
             "| newline (one sentence per line). Sentences a mention straddles are joined.")] = None,
    splits: Annotated[str, typer.Option(
        help="Splits to write queries for (ecbplus, coresearch, cdcr-json: also the documents kept).")
    ] = "train,dev,test",
    distractors: Annotated[Optional[list[Path]], typer.Option(  # noqa: UP045
        help="JSONL of passages without mentions ({doc_id, title?, text}); repeatable.")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing dataset directory.")] = False,
) -> None:
    """Turn a coreference corpus into a coreference-search dataset (passages, queries, qrels)."""
    from corefsearch.cli.report import print_build_summary, print_statistics_check
    from corefsearch.datasets.build import BuildOptions, build_dataset
    from corefsearch.datasets.cdcr_json import CdcrReport, statistics_rows
    from corefsearch.datasets.sources import SourceOptions, plain_source, read_source

    kept_splits = tuple(s.strip() for s in splits.split(",") if s.strip())
    source_options = SourceOptions(mention_type, validated_only, sentences_csv, passage, kept_splits,
                                   sentences=sentences, split_by=split_by, chains=chains)
    ratios = _floats(split_ratios, "--split-ratios")
    options = BuildOptions(passage=passage, window=window, split_ratios=ratios, seed=seed,  # type: ignore[arg-type]
                           splits=kept_splits,
                           source={"format": source_format, "input": str(input_path),
                                   **source_options.resolved(source_format), "validated_only": validated_only,
                                   "distractors": [str(p) for p in distractors or []]})
    options.validate()
    report = CdcrReport()
    documents = read_source(source_format, input_path, source_options, report=report)
    plain = plain_source(source_format, input_path)  # no gold mentions: recorded, and said in one line
    options.source["mentions"] = "none" if plain else "gold"
    summary = build_dataset(documents, out, options, distractors=distractors or [], overwrite=overwrite,
                            source_name=str(input_path))
    if plain:
        log_line(plain)
    print_build_summary(summary, console)
    if source_format == "cdcr-json":
        print_statistics_check(statistics_rows(input_path, report), input_path, console)



@app.command("add")
@user_errors
def add_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset, to grow.")],
    corpus: Annotated[Path, typer.Option(
        "--corpus", help="Folder of the new documents: corpus.jsonl, and mentions.jsonl if they have mentions "
                         "(the generic format of build-dataset).")],
    index: Annotated[Optional[list[Path]], typer.Option(  # noqa: UP045
        "--index", metavar="INDEX",
        help="Index directory built from DATASET (its lucene/ and dense/ take the new passages); repeatable. "
             "Indexes not named no longer match the dataset.")] = None,
    encoder: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="Dense: the passage encoder (default: the one the dense index was built with).")] = None,
    device: Annotated[str, typer.Option(help="Dense: auto | cpu | cuda.")] = "auto",
    precision: PrecisionOption = "auto",
    batch_size: EncodeBatchOption = None,
    threads: Annotated[int, typer.Option(help="Indexing threads (Lucene).")] = 2,
) -> None:
    """Append new documents to a dataset and its indexes without a rebuild (all switched in at the end)."""
    from corefsearch.search.add import add_documents

    with precision_scope(precision):
        summary = add_documents(dataset, corpus, index or [], encoder=encoder, device=device,
                                batch_size=encode_batch_size(batch_size, device), threads=threads)
    print_add_summary(summary, console)


