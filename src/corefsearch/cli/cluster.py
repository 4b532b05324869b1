"""``cluster``: every gold (or predicted) mention of a split into coreference clusters."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer

from corefsearch.base.precision import DEFAULT_PRECISION, PRECISION_HELP
from corefsearch.cli.app import app, console, log_line, user_errors
from corefsearch.cli.fields import options_from
from corefsearch.cli.options import (
    RayCpusOption,
    RayOption,
    RayWorkersOption,
    precision_scope,
    ray_options,
)
from corefsearch.cli.report import print_cluster_summary


@dataclass
class ClusterArgs:
    """The options of ``cluster`` (less ``--ray``), as ``cluster_dataset`` takes them (None: its default)."""

    out: Path = field(metadata={"option": "--out", "help": "Clusters JSONL to write ({mention_id, cluster_id} lines)."})
    method: str = field(metadata={"help": (
        "lemma (mentions whose syntactic head has the same lemma, spaCy) | lemma-heuristic (Ahmed et al. 2023: the "
        "lemma of one mention occurs in the other's text and their sentences overlap; linked pairs closed "
        "transitively) | singletons (each mention alone) | encoder (the mention encoder of --model, average-linkage "
        "clustering of its vectors) | gold (the dataset's own clusters: the key, e.g. for the reference scorer with "
        "--conll).")})
    split: str | None = field(default=None, metadata={"help": (
        "The split whose mentions are clustered (default test). With --mentions predicted: the passages that record "
        "it, or all: every passage (the default when no passage records a split).")})
    mentions: str = field(default="gold", metadata={"help": (
        "gold (the dataset's annotated mentions) | predicted (a detector's, from `corefsearch detect`; each line of "
        "--out then adds passage_id, doc_id, start, end and detector).")})
    scope: str | None = field(default=None, metadata={"help": (
        "topic (within each document topic the dataset records; the default) | predicted-topic (within groups of "
        "documents clustered by --topic-method, or given by --topics) | corpus (all mentions of the split at once).")})
    topic_method: str | None = field(default=None, metadata={"help": (
        "With --scope predicted-topic: agglomerative (average linkage on the mean of the default encoder's "
        "(all-MiniLM-L6-v2) and TF-IDF's cosine similarities, cut at --topic-threshold or into --n-topics groups; "
        "the default) | agglomerative-tfidf (the same on TF-IDF alone, the former default) | kmeans (K-means on "
        "TF-IDF into --n-topics groups).")})
    topic_threshold: float | None = field(default=None, metadata={"help": (
        "With --scope predicted-topic: the cosine distance at which documents stop being merged (default 0.64; "
        "0.8 with --topic-method agglomerative-tfidf).")})
    n_topics: int | None = field(default=None, metadata={"option": "--n-topics", "help": (
        "With --scope predicted-topic: the number of document groups (needed by --topic-method kmeans).")})
    topics: Path | None = field(default=None, metadata={"option": "--topics", "help": (
        "Group the documents as this file says (doc_id<TAB>group lines; implies --scope predicted-topic).")})
    write_topics: Path | None = field(default=None, metadata={
        "option": "--write-topics", "help": "Also write the document groups used (doc_id<TAB>group lines)."})
    conll: Path | None = field(default=None, metadata={"help": (
        "Also write the clusters in the CoNLL format of the reference scorer (one pseudo-document, one line per "
        "mention).")})
    model: Path | None = field(default=None, metadata={
        "option": "--model", "help": (
            "With --method encoder: the mention encoder folder from `train clusterer`, or a shipped model's name "
            "(`corefsearch models`; default: the shipped mention encoder for the mentions' type).")})
    threshold: float | None = field(default=None, metadata={"help": (
        "With --method encoder: τ, the cosine distance at which clusters stop merging (default: the model's, picked "
        "on dev by `train clusterer`).")})
    lemma_weight: float | None = field(default=None, metadata={"help": (
        "With --method encoder: β, the cosine distance taken off a pair of mentions with the same head lemma (0: the "
        "encoder alone; default: the model's, picked on dev by `train clusterer`).")})
    evidence: str | None = field(default=None, metadata={"help": (
        "With --method encoder: what earns a pair the bonus β of --lemma-weight: lemma (the same head lemma; the "
        "default) | lemma-heuristic (the pair is linked by the rule of --method lemma-heuristic, at its "
        "--sentence-overlap).")})
    sentence_overlap: float | None = field(default=None, metadata={"help": (
        "With --method lemma-heuristic (or --method encoder --evidence lemma-heuristic): J, the Jaccard similarity of "
        "two mentions' sentences (the sets of their content words' lemmas) that a link must exceed (default 0.05; 0: "
        "no sentence condition).")})
    pair_scorer: Path | None = field(default=None, metadata={"option": "--pair-scorer", "help": (
        "With --method encoder: a pair scorer from `train pair-scorer` scores the candidate pairs (same head lemma, "
        "the encoder's nearest mentions) and they are clustered at its threshold instead of the encoder's τ.")})
    pair_threshold: float | None = field(default=None, metadata={"help": (
        "With --pair-scorer: the probability above which scored pairs link (default: the scorer's, picked on dev by "
        "`train pair-scorer`).")})
    k: int | None = field(default=None, metadata={"option": "--k", "help": (
        "With --method encoder --scope corpus: neighbours per mention in the kNN graph (default 50).")})
    batch_size: int = field(default=64, metadata={"help": "With --method encoder: mentions encoded per batch."})
    device: str = field(default="auto", metadata={"help": "With --method encoder: auto | cpu | cuda"})
    backend: str | None = field(default=None, metadata={"help": (
        "With --method encoder: torch | onnx | onnx-int8 (the encoder on ONNX Runtime, on the CPU: run `corefsearch "
        "export-onnx MODEL` first); default torch, or onnx-int8 for a folder that ships only that export.")})
    precision: str = field(default=DEFAULT_PRECISION, metadata={"help": PRECISION_HELP})


@app.command("cluster")
@user_errors
@options_from(ClusterArgs)
def cluster_command(
    dataset: Annotated[Path, typer.Argument(metavar="DATASET", help="Dataset directory from `build-dataset`.")],
    *,
    args: ClusterArgs,
    ray: RayOption = None,
    ray_workers: RayWorkersOption = None,
    ray_cpus_per_worker: RayCpusOption = None,
) -> None:
    """Cluster every gold (or predicted) mention of a split into coreference clusters (baselines: lemma,
    lemma-heuristic, singletons; or a trained mention encoder)."""
    from corefsearch.cluster.run import cluster_dataset

    ray_given = ray_options(ray, ray_workers, ray_cpus_per_worker)
    encoding = None
    if ray_given is not None:  # the mentions of --method encoder encoded on a Ray cluster, to the same vectors
        from corefsearch.distributed.mention_encoding import RayMentionEncoding

        encoding = RayMentionEncoding(ray_given)
    with precision_scope(args.precision, backend=args.backend, ray=ray_given):
        summary = cluster_dataset(dataset, args.out, method=args.method, split=args.split, scope=args.scope,
                                  conll=args.conll, topic_threshold=args.topic_threshold,
                                  topic_method=args.topic_method, n_topics=args.n_topics, topics=args.topics,
                                  write_topics=args.write_topics, model=args.model, threshold=args.threshold,
                                  k=args.k, batch_size=args.batch_size, device=args.device,
                                  lemma_weight=args.lemma_weight, encoding=encoding, mentions=args.mentions,
                                  sentence_overlap=args.sentence_overlap, pair_scorer=args.pair_scorer,
                                  pair_threshold=args.pair_threshold, evidence=args.evidence, backend=args.backend,
                                  log=log_line)
    print_cluster_summary(summary, summary.scope, console)


