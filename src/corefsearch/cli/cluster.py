"""``cluster``: every gold (or predicted) mention of a split into coreference clusters."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from corefsearch.cli.app import app, console, user_errors
from corefsearch.cli.options import (
    PrecisionOption,
    RayCpusOption,
    RayOption,
    RayWorkersOption,
    precision_scope,
    ray_options,
)
from corefsearch.cli.report import print_cluster_summary


@app.command("cluster")
@user_errors
def cluster_command(
    dataset: Annotated[Path, typer.Argument(metavar="DATASET", help="Dataset directory from `build-dataset`.")],
    out: Annotated[Path, typer.Option("--out", help="Clusters JSONL to write ({mention_id, cluster_id} lines).")],
    method: Annotated[str, typer.Option(
        help="lemma (mentions whose syntactic head has the same lemma, spaCy) | lemma-heuristic (Ahmed et al. "
             "2023: the lemma of one mention occurs in the other's text and their sentences overlap; linked "
             "pairs closed transitively) | singletons (each mention alone) | "
             "encoder (the mention encoder of --model, average-linkage clustering of its vectors) | gold (the "
             "dataset's own clusters: the key, e.g. for the reference scorer with --conll).")],
    split: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="The split whose mentions are clustered (default test). With --mentions predicted: the passages that "
             "record it, or all: every passage (the default when no passage records a split).")] = None,
    mentions: Annotated[str, typer.Option(
        help="gold (the dataset's annotated mentions) | predicted (a detector's, from `corefsearch detect`; each "
             "line of --out then adds passage_id, doc_id, start, end and detector).")] = "gold",
    scope: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="topic (within each document topic the dataset records; the default) | predicted-topic (within "
             "groups of documents clustered by TF-IDF, or given by --topics) | corpus (all mentions of the split at "
             "once).")] = None,
    topic_method: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="With --scope predicted-topic: agglomerative (average linkage cut at --topic-threshold, or into "
             "--n-topics groups; the default) | kmeans (K-means into --n-topics groups).")] = None,
    topic_threshold: Annotated[Optional[float], typer.Option(  # noqa: UP045
        help="With --scope predicted-topic: the cosine distance at which documents stop being merged "
             "(default 0.8).")] = None,
    n_topics: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--n-topics", help="With --scope predicted-topic: the number of document groups (needed by --topic-method "
                           "kmeans).")] = None,
    topics: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--topics", help="Group the documents as this file says (doc_id<TAB>group lines; implies --scope "
                         "predicted-topic).")] = None,
    write_topics: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--write-topics", help="Also write the document groups used (doc_id<TAB>group lines).")] = None,
    conll: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        help="Also write the clusters in the CoNLL format of the reference scorer (one pseudo-document, "
             "one line per mention).")] = None,
    model: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--model", help="With --method encoder: the mention encoder folder from `train clusterer`.")] = None,
    threshold: Annotated[Optional[float], typer.Option(  # noqa: UP045
        help="With --method encoder: τ, the cosine distance at which clusters stop merging (default: the "
             "model's, picked on dev by `train clusterer`).")] = None,
    lemma_weight: Annotated[Optional[float], typer.Option(  # noqa: UP045
        help="With --method encoder: β, the cosine distance taken off a pair of mentions with the same head "
             "lemma (0: the encoder alone; default: the model's, picked on dev by `train clusterer`).")] = None,
    evidence: Annotated[Optional[str], typer.Option(  # noqa: UP045
        help="With --method encoder: what earns a pair the bonus β of --lemma-weight: lemma (the same head lemma; "
             "the default) | lemma-heuristic (the pair is linked by the rule of --method lemma-heuristic, at its "
             "--sentence-overlap).")] = None,
    sentence_overlap: Annotated[Optional[float], typer.Option(  # noqa: UP045
        help="With --method lemma-heuristic (or --method encoder --evidence lemma-heuristic): J, the Jaccard "
             "similarity of two mentions' sentences (the sets of their content words' lemmas) that a link must "
             "exceed (default 0.05; 0: no sentence condition).")
                                ] = None,
    pair_scorer: Annotated[Optional[Path], typer.Option(  # noqa: UP045
        "--pair-scorer", help="With --method encoder: a pair scorer from `train pair-scorer` scores the candidate "
                              "pairs (same head lemma, the encoder's nearest mentions) and they are clustered at its "
                              "threshold instead of the encoder's τ.")] = None,
    pair_threshold: Annotated[Optional[float], typer.Option(  # noqa: UP045
        help="With --pair-scorer: the probability above which scored pairs link (default: the scorer's, picked on "
             "dev by `train pair-scorer`).")] = None,
    k: Annotated[Optional[int], typer.Option(  # noqa: UP045
        "--k", help="With --method encoder --scope corpus: neighbours per mention in the kNN graph (default 50).")
                 ] = None,
    batch_size: Annotated[int, typer.Option(help="With --method encoder: mentions encoded per batch.")] = 64,
    device: Annotated[str, typer.Option(help="With --method encoder: auto | cpu | cuda")] = "auto",
    precision: PrecisionOption = "auto",
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
    with precision_scope(precision, ray=ray_given):
        summary = cluster_dataset(dataset, out, method=method, split=split, scope=scope, conll=conll,
                                  topic_threshold=topic_threshold, topic_method=topic_method, n_topics=n_topics,
                                  topics=topics, write_topics=write_topics, model=model, threshold=threshold, k=k,
                                  batch_size=batch_size, device=device, lemma_weight=lemma_weight, encoding=encoding,
                                  mentions=mentions, sentence_overlap=sentence_overlap, pair_scorer=pair_scorer,
                                  pair_threshold=pair_threshold, evidence=evidence)
    print_cluster_summary(summary, summary.scope, console)


