"""``index`` (Lucene and dense) and ``java-env`` (Pyserini's own command line on our indexes)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from corefsearch.base.errors import CorefSearchError
from corefsearch.base.precision import DEFAULT_PRECISION, PRECISION_HELP
from corefsearch.cli.app import app, console, user_errors
from corefsearch.cli.fields import options_from
from corefsearch.cli.options import (
    RayCpusOption,
    RayOption,
    RayWorkersOption,
    option_of,
    precision_scope,
    ray_options,
)
from corefsearch.search.backends.dense import DenseIndexOptions
from corefsearch.search.backends.lucene import LuceneIndexOptions


@dataclass
class IndexArgs:
    """The options of ``index`` (less ``--ray``): the Lucene index's (:class:`LuceneIndexOptions`) and the dense
    index's (:class:`DenseIndexOptions`; None: not given)."""

    out: Path = field(metadata={"option": "--out",
                                "help": "Index directory (OUT/lucene, OUT/dense; both can live in it)."})
    threads: int = option_of(LuceneIndexOptions, "threads")
    overwrite: bool = field(default=False, metadata={"help": "Replace an existing index of the kind being built."})
    fields: bool = option_of(LuceneIndexOptions, "fields")
    dense: bool = field(default=False, metadata={
        "option": "--dense", "help": "Build the dense (FAISS) index OUT/dense instead of the Lucene one."})
    encoder: str | None = option_of(DenseIndexOptions, "encoder")
    faiss_type: str = option_of(DenseIndexOptions, "faiss_type")
    batch_size: int | None = option_of(DenseIndexOptions, "batch_size", default=None)  # None: by device
    shard: str | None = option_of(DenseIndexOptions, "shard")
    merge_shards: int | None = option_of(DenseIndexOptions, "merge_shards")
    device: str = option_of(DenseIndexOptions, "device")
    precision: str = field(default=DEFAULT_PRECISION, metadata={"help": PRECISION_HELP})
    chunk_size: int = option_of(DenseIndexOptions, "chunk_size")
    backend: str | None = option_of(DenseIndexOptions, "backend", default=None)  # None: the encoder folder's default


@app.command("index")
@user_errors
@options_from(IndexArgs)
def index_command(
    dataset: Annotated[Path, typer.Argument(help="Dataset directory from build-dataset.")],
    *,
    args: IndexArgs,
    ray: RayOption = None,
    ray_workers: RayWorkersOption = None,
    ray_cpus_per_worker: RayCpusOption = None,
) -> None:
    """Build a Lucene (BM25) index of a dataset's passages, or with --dense a FAISS index of their vectors."""
    from corefsearch.base.onnx_backend import resolve_backend
    from corefsearch.cli.report import print_index_summary
    from corefsearch.dense.encoder import resolve_batch_size
    from corefsearch.search.pipeline import index_dataset

    dense_options = None
    if args.dense:
        runs = resolve_backend(args.encoder, args.backend, args.device) if args.encoder else args.backend
        dense_options = DenseIndexOptions(args.encoder, args.faiss_type,
                                          resolve_batch_size(args.batch_size, args.device, runs), args.shard,
                                          args.merge_shards, args.device, args.chunk_size, backend=args.backend,
                                          ray=ray_options(ray, ray_workers, ray_cpus_per_worker))
    elif (args.encoder is not None or args.shard is not None or args.merge_shards is not None
          or args.backend is not None or ray is not None):
        raise CorefSearchError("--encoder, --shard, --merge-shards, --backend and --ray build the dense index: "
                               "add --dense")
    with precision_scope(args.precision, backend=args.backend, ray=dense_options.ray if dense_options else None):
        if dense_options is not None:
            summary = index_dataset(dataset, args.out, "dense", dense_options, args.overwrite)
        else:
            summary = index_dataset(dataset, args.out, "lucene", LuceneIndexOptions(args.threads, args.fields),
                                    args.overwrite)
    print_index_summary(summary, console)


@app.command("java-env")
@user_errors
def java_env_command() -> None:
    """Print the shell exports for running Pyserini's own command line on corefsearch's indexes.

    Use as `eval "$(corefsearch java-env)"`; in Python, call `corefsearch.configure_java()` instead.
    """
    from corefsearch.sparse.java import java_env_script

    sys.stdout.write(java_env_script())


