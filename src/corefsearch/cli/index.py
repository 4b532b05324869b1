"""``index`` (Lucene and dense) and ``java-env`` (Pyserini's own command line on our indexes)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from corefsearch.base.errors import CorefSearchError
from corefsearch.cli.app import app, console, user_errors
from corefsearch.cli.options import (
    ENCODER_HELP,
    EncodeBatchOption,
    PrecisionOption,
    RayCpusOption,
    RayOption,
    RayWorkersOption,
    encode_batch_size,
    precision_scope,
    ray_options,
)


@app.command("index")
@user_errors
def index_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset.")],
    out: Annotated[Path, typer.Option("--out", help="Index directory (OUT/lucene, OUT/dense; both can live in it).")],
    threads: Annotated[int, typer.Option(help="Indexing threads (Lucene).")] = 2,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing index of the kind being built.")] = False,
    fields: Annotated[bool, typer.Option(
        "--fields", help="Lucene: also index the sentence, title and document fields that `search --fields` "
                         "and `--query-format document` need (INDEX/lucene/fields; about 2.4x the indexing time).")
                    ] = False,
    dense: Annotated[bool, typer.Option(
        "--dense", help="Build the dense (FAISS) index OUT/dense instead of the Lucene one.")] = False,
    encoder: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help=f"With --dense: {ENCODER_HELP}.")] = None,
    faiss_type: Annotated[str, typer.Option("--faiss", help="With --dense: flat | hnsw | ivfpq.")] = "flat",
    batch_size: EncodeBatchOption = None,
    shard: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="With --dense: encode only shard I of N (I/N, I from 0) into OUT/dense-shards/.")] = None,
    merge_shards: Annotated[Optional[int], typer.Option(  # noqa: UP045
        help="With --dense: merge the N shards in OUT/dense-shards/ into OUT/dense.")] = None,
    device: Annotated[str, typer.Option(help="With --dense: auto | cpu | cuda.")] = "auto",
    precision: PrecisionOption = "auto",
    chunk_size: Annotated[int, typer.Option(
        help="With --dense: passages per saved chunk (what an interrupted run resumes from; "
             "shards are whole chunks).")] = 8192,
    backend: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="With --dense: run the passage encoder with torch (default) | onnx | onnx-int8 (ONNX Runtime on the "
             "CPU, from the export `corefsearch export-onnx MODEL_DIR` writes; recorded in the manifest).")] = None,
    ray: RayOption = None,
    ray_workers: RayWorkersOption = None,
    ray_cpus_per_worker: RayCpusOption = None,
) -> None:
    """Build a Lucene (BM25) index of a dataset's passages, or with --dense a FAISS index of their vectors."""
    from corefsearch.cli.report import print_index_summary
    from corefsearch.search.backends.dense import DenseIndexOptions
    from corefsearch.search.backends.lucene import LuceneIndexOptions
    from corefsearch.search.pipeline import index_dataset

    dense_options = None
    if dense:
        dense_options = DenseIndexOptions(encoder, faiss_type, encode_batch_size(batch_size, device, backend), shard,
                                          merge_shards, device, chunk_size,
                                          backend=backend or "torch",
                                          ray=ray_options(ray, ray_workers, ray_cpus_per_worker))
    elif (encoder is not None or shard is not None or merge_shards is not None or backend is not None
          or ray is not None):
        raise CorefSearchError("--encoder, --shard, --merge-shards, --backend and --ray build the dense index: "
                               "add --dense")
    with precision_scope(precision, backend=backend, ray=dense_options.ray if dense_options else None):
        summary = index_dataset(dataset, out, "dense", dense_options, overwrite) if dense_options is not None \
            else index_dataset(dataset, out, "lucene", LuceneIndexOptions(threads, fields), overwrite)
    print_index_summary(summary, console)



@app.command("java-env")
@user_errors
def java_env_command() -> None:
    """Print the shell exports for running Pyserini's own command line on corefsearch's indexes.

    Use as `eval "$(corefsearch java-env)"`; in Python, call `corefsearch.configure_java()` instead.
    """
    from corefsearch.sparse.java import java_env_script

    sys.stdout.write(java_env_script())


