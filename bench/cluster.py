"""Whole-corpus coreference in the field's standard setting: each corpus's test mentions clustered by each method
of ``corefsearch cluster`` within each grouping of its documents, scored with MUC, B³, CEAF-e, LEA and CoNLL F1
(``corefsearch evaluate --clusters``), singletons kept and dropped; one table per corpus.

Corpora (``--corpus NAME=DATASET[:predicted]``, repeatable; default: ECB+ events and entities, built here
with every gold mention of the validated sentences, ``--chains all --validated-only``, the usual ECB+ CDCR
set-up of Cybulska & Vossen 2015 and Barhom et al. 2019). ``:predicted`` clusters the dataset's predicted
mentions (``corefsearch detect``; ``cluster --mentions predicted``), scored against its gold mentions with
exact spans. Each corpus's mention type is its dataset's (``--mention-type`` at build time).

Groupings (``--groupings``): ``predicted-topic`` (``--scope predicted-topic`` at its default, the document
clustering chosen on train and dev; its agreement with the gold topics and ECB+ subtopics is given),
``subtopics`` (the ECB+ gold subtopics as a ``--topics`` file: a reference row, close to the predicted topics
of Barhom et al. 2019 that the published systems use), ``topic`` (gold topics, a reference row) and
``corpus`` (every mention of the split at once).

Methods: ``lemma``, ``lemma-heuristic`` (Ahmed et al. 2023's rule), and with ``--model TYPE=DIR``: ``encoder``
(its own τ and β), ``encoder + heuristic evidence`` (``--evidence lemma-heuristic``, with ``--evidence-options``,
dev's choice) and, with ``--pair-scorer TYPE=DIR``, ``encoder + pair scorer``. Each clustering runs as its own
``corefsearch cluster`` process under ``/usr/bin/time``, so its seconds and peak memory are what a user sees
(start-up, spaCy and model loading included); the tables give them per 1,000 mentions too.

Prints the tables and writes them into ``bench/RESULTS.md`` as the head of the section ``## Whole-corpus
coreference (bench/cluster.py)``, keeping the section's ``###`` subsections (other scripts write those).

Run: ``python bench/cluster.py [--out-dir DIR] [--model TYPE=DIR ...] [--pair-scorer TYPE=DIR ...]
[--corpus NAME=DATASET[:predicted] ...] [--groupings predicted-topic,subtopics,corpus]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("COREFSEARCH_QUIET", "1")

from bm25 import machine, markdown_table, write_section  # noqa: E402

from corefsearch.evaluate.coref import METRIC_NAMES  # noqa: E402
from corefsearch.evaluate.coref_files import evaluate_clusters  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ECBPLUS = REPO / "data" / "ecbplus" / "ECBplus.tar.gz"
SECTION = "## Whole-corpus coreference (bench/cluster.py)"
SCOPES = ("topic", "predicted-topic", "corpus")
CLI = [sys.executable, "-m", "corefsearch.cli"]
# Published CoNLL F1 on ECB+ test events, predicted topics, singletons kept (Hsu & Horwood 2022, Table 2;
# the lemma baseline as they report it) and at corpus level without singletons: for context only.
PUBLISHED = "lemma 75.7; Hsu & Horwood 77.9 (BERT-base), 81.8 (RoBERTa-base), 83.3 (RoBERTa-large); corpus level " \
            "without singletons 65.2"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def timed_run(command: list[str]) -> tuple[float, int, str]:
    """Run ``command`` under ``/usr/bin/time``; its wall seconds, peak resident memory in kB and stdout."""
    with tempfile.TemporaryDirectory() as folder:
        stats = Path(folder) / "time.txt"
        result = subprocess.run(["/usr/bin/time", "-o", str(stats), "-f", "%e %M", *command],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"failed: {shlex.join(command)}\n{result.stderr}")
        seconds, peak = stats.read_text().split()[-2:]
        return float(seconds), int(peak), result.stdout


def timed_command(command: list[str]) -> tuple[float, int]:
    """Run ``command`` under ``/usr/bin/time``; its wall seconds and peak resident memory in kB."""
    seconds, peak, _ = timed_run(command)
    return seconds, peak


def build(root: Path, mention_type: str) -> Path:
    out = root / f"ecbplus-{mention_type}-all-chains"
    if not (out / "manifest.json").exists():
        log(f"building the ECB+ {mention_type} dataset (all chains, validated sentences)")
        subprocess.run([*CLI, "build-dataset", str(ECBPLUS), "--format", "ecbplus", "--mention-type", mention_type,
                        "--chains", "all", "--validated-only", "--out", str(out)], check=True,
                       stdout=subprocess.DEVNULL)
    return out


def parse_model(text: str) -> tuple[str | None, Path]:
    """``TYPE=DIR`` (a model for one mention type) or ``DIR`` (for every type)."""
    kind, sep, folder = text.partition("=")
    return (kind, Path(folder)) if sep and kind in ("event", "entity") else (None, Path(text))


def model_lines(models: list[tuple[str | None, Path]]) -> list[str]:
    """What each encoder is: its training budget and dev curve, from the files ``train clusterer`` wrote."""
    lines = []
    for kind, model in models:
        args = json.loads((model / "training_args.json").read_text(encoding="utf-8"))
        curve = json.loads((model / "dev_curve.json").read_text(encoding="utf-8"))
        options = args.get("options", args)
        dev = ", ".join(f"epoch {e['epoch']} (step {e['step']}): {100 * e['CoNLL F1']:.2f} at τ {e['threshold']:g}"
                        for e in curve if e.get("CoNLL F1") is not None)
        lines.append(f"- encoder {model.name} ({kind or 'every type'}): `train clusterer` from "
                     f"{options.get('base_model') or 'the bundled all-MiniLM-L6-v2'}, "
                     f"{args['counts']['train_pairs']:,} pairs of {args['counts']['train_mentions']:,} train mentions, "
                     f"{sum(e.get('seconds', 0) for e in curve) / 60:.0f} min on the CPU (dev evaluations included); "
                     f"options {json.dumps(options, sort_keys=True)}; dev CoNLL F1 (gold topics): {dev}; "
                     f"kept τ {args.get('threshold')}")
    return lines


# Published CoNLL F1 on ECB+ test, singletons kept, each with its setting, for context only.
PUBLISHED_ROWS = [
    ("events", "the same-lemma heuristic, Ahmed et al. 2023 (their predicted topics, Barhom et al. 2019; lemma "
               "pairs mined from train)", "76.4"),
    ("events", "lemma heuristic + RoBERTa-base cross-encoder, Ahmed et al. 2023 (same topics)", "80.3"),
    ("events", "Hsu & Horwood 2022, contrastive encoder: BERT-base / RoBERTa-base / RoBERTa-large (predicted topics)",
     "77.9 / 81.8 / 83.3"),
    ("events", "Hsu & Horwood 2022, RoBERTa-large, corpus level, singletons dropped", "65.2"),
]


def parse_corpus(text: str) -> tuple[str, Path, str]:
    """``NAME=DATASET[:predicted]``."""
    name, sep, rest = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--corpus NAME=DATASET[:predicted], got {text!r}")
    kind = "gold"
    if rest.endswith(":predicted"):
        rest, kind = rest[: -len(":predicted")], "predicted"
    return name, Path(rest), kind


def mention_type_of(dataset: Path) -> str:
    source = json.loads((dataset / "manifest.json").read_text(encoding="utf-8"))["options"].get("source", {})
    return str(source.get("mention_type", "all"))


def method_rows(mention_type: str, models: list[tuple[str | None, Path]], scorers: list[tuple[str | None, Path]],
                evidence_by_type: dict[str, list[str]]) -> list[tuple[str, list[str]]]:
    evidence = evidence_by_type.get(mention_type, evidence_by_type.get("", []))
    rows = [("lemma", ["--method", "lemma"]), ("lemma-heuristic", ["--method", "lemma-heuristic"])]
    for kind, model in models:
        if kind not in (None, mention_type):
            continue
        encoder = ["--method", "encoder", "--model", str(model)]
        rows.append((f"encoder {model.name}", encoder))
        rows.append((f"encoder {model.name} + heuristic evidence",
                     [*encoder, "--evidence", "lemma-heuristic", *evidence]))
        rows += [(f"encoder {model.name} + pair scorer {scorer.name}", [*encoder, "--pair-scorer", str(scorer)])
                 for kind_s, scorer in scorers if kind_s in (None, mention_type)]
    return rows


def subtopics_file(dataset: Path, folder: Path) -> Path | None:
    """The ECB+ gold subtopics of every document as a ``--topics`` file (None: not ECB+ document ids)."""
    from corefsearch.cluster.agreement import ecbplus_subtopic
    from corefsearch.datasets.dataset import Dataset

    lines = {}
    for passage in Dataset(dataset).passages():
        subtopic = ecbplus_subtopic(passage.doc_id, passage.topic)
        if subtopic is None:
            return None
        lines[passage.doc_id] = subtopic
    out = folder / f"{dataset.name}.subtopics.tsv"
    out.write_text("".join(f"{doc}\t{group}\n" for doc, group in sorted(lines.items())), encoding="utf-8")
    return out


def grouping_options(grouping: str, dataset: Path, folder: Path) -> list[str] | None:
    if grouping == "subtopics":
        found = subtopics_file(dataset, folder)
        return None if found is None else ["--topics", str(found)]
    return ["--scope", grouping]


def agreement_line(name: str, dataset: Path, written: Path) -> str:
    """The predicted grouping's agreement with the gold topics and subtopics (ARI, V-measure)."""
    from corefsearch.cluster.agreement import agreement, ecbplus_subtopics
    from corefsearch.datasets.dataset import Dataset

    groups = dict(line.split("\t") for line in written.read_text(encoding="utf-8").splitlines()
                  if line and not line.startswith("#"))
    topics = {p.doc_id: str(p.topic) for p in Dataset(dataset).passages() if p.doc_id in groups}
    parts = [f"{len(set(groups.values()))} groups of {len(groups):,} documents"]
    for label, reference in (("gold topics", topics), ("gold subtopics", ecbplus_subtopics(topics))):
        if reference:
            found = agreement(groups, reference)
            parts.append(f"{label} ({found.reference_groups}): ARI {found.ari:.3f}, V-measure {found.v_measure:.3f}")
    return f"- {name}, predicted topics: " + "; ".join(parts)


def run(root: Path, corpora: list[tuple[str, Path, str]], groupings: list[str],
        models: list[tuple[str | None, Path]], scorers: list[tuple[str | None, Path]],
        evidence: dict[str, list[str]]) -> list[str]:
    header = ["Grouping", "Method", "CoNLL F1", "CoNLL F1, singletons dropped",
              *(f"{m} F1" for m in METRIC_NAMES), "s", "peak MB", "s / 1,000 mentions"]
    lines: list[str] = []
    for name, dataset, kind in corpora:
        mention_type = mention_type_of(dataset)
        rows: list[list[str]] = []
        notes: list[str] = []
        mentions = None
        for grouping in groupings:
            options = grouping_options(grouping, dataset, root)
            if options is None:
                notes.append(f"- {grouping}: not ECB+ document ids, no row")
                continue
            for method, method_options in method_rows(mention_type, models, scorers, evidence):
                if grouping == "corpus" and "--pair-scorer" in method_options:
                    continue  # the pair scorer reads candidate pairs within groups (it refuses --scope corpus)
                stem = f"{name}-{grouping}-{method}".replace(" ", "_").replace("+", "plus").replace("/", "_")
                out = root / "clusters" / f"{stem}.jsonl"
                out.parent.mkdir(parents=True, exist_ok=True)
                written = root / "clusters" / f"{stem}.topics.tsv"
                extra = ["--write-topics", str(written)] if grouping == "predicted-topic" else []
                log(f"{name}: {method}, {grouping}")
                try:
                    seconds, peak = timed_command([*CLI, "cluster", str(dataset), "--out", str(out), "--split",
                                                   "test", "--mentions", kind, *options, *extra, *method_options])
                except SystemExit as failed:  # one row says so; the other rows still run
                    reason = str(failed).strip().splitlines()[-1][:160]
                    rows.append([grouping, method, "failed", "", *([""] * len(METRIC_NAMES)), "", "", reason])
                    continue
                if extra and not any(n.startswith(f"- {name}, predicted") for n in notes):
                    notes.append(agreement_line(name, dataset, written))
                mentions = sum(1 for _ in out.open(encoding="utf-8"))
                kept = evaluate_clusters(out, dataset, split="test", singletons="keep").scores
                dropped = evaluate_clusters(out, dataset, split="test", singletons="drop").scores
                rows.append([grouping, method, f"{100 * kept.conll_f1:.2f}", f"{100 * dropped.conll_f1:.2f}",
                             *(f"{100 * score.f1:.2f}" for score in kept.metrics().values()), f"{seconds:.1f}",
                             f"{peak / 1024:.0f}", f"{1000 * seconds / max(mentions, 1):.1f}"])
        lines += [f"### {name}: test, {kind} mentions ({mentions or 0:,} clustered), ×100", "", *notes, "",
                  markdown_table(header, rows, "ll" + "r" * (len(header) - 2)), ""]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=None, help="Datasets and clusterings (default: a temp dir).")
    parser.add_argument("--corpus", type=parse_corpus, action="append", default=[],
                        help="NAME=DATASET[:predicted]; repeatable (default: ECB+ events and entities, built here).")
    parser.add_argument("--groupings", default="predicted-topic,subtopics,corpus",
                        help="predicted-topic | subtopics | topic | corpus, comma-separated.")
    parser.add_argument("--model", type=parse_model, action="append", default=[],
                        help="A mention encoder from `corefsearch train clusterer`, as DIR (every mention type) or "
                             "TYPE=DIR (event or entity only); repeatable.")
    parser.add_argument("--pair-scorer", type=parse_model, action="append", default=[],
                        help="A pair scorer from `corefsearch train pair-scorer`, as DIR or TYPE=DIR; repeatable.")
    parser.add_argument("--evidence-options", action="append", default=[],
                        help="[TYPE=]OPTIONS of the encoder + heuristic evidence rows (dev's choice, e.g. "
                             "'entity=--lemma-weight 0.2 --threshold 0.1'); repeatable.")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "RESULTS.md")
    args = parser.parse_args(argv)
    root = args.out_dir or Path(tempfile.mkdtemp(prefix="corefsearch-cluster-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    corpora = args.corpus or [(f"ECB+ {t}s", build(root, t), "gold") for t in ("event", "entity")]
    started = time.perf_counter()
    tables = run(root, corpora, [g.strip() for g in args.groupings.split(",") if g.strip()], args.model,
                 args.pair_scorer, evidence_options(args.evidence_options))
    minutes = (time.perf_counter() - started) / 60
    published = markdown_table(["Mentions", "Published system (setting)", "CoNLL F1"],
                               [list(row) for row in PUBLISHED_ROWS], "llr")
    lines = [SECTION, "",
             f"- Date: {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M')} UTC, total run time "
             f"{minutes:.1f} min",
             *(f"- {key}: {value}" for key, value in machine().items()),
             f"- Command: `{shlex.join(['python', 'bench/cluster.py', *(sys.argv[1:] if argv is None else argv)])}`",
             "- Every clustering is of the test split; F1 ×100, singletons kept unless the column says otherwise; s "
             "and peak MB: the whole `corefsearch cluster` process (`/usr/bin/time`).",
             *model_lines(args.model),
             "", "Published, for context (ECB+ test, singletons kept unless said):", "", published, "", *tables]
    head = "\n".join(lines)
    print(head)
    write_head(args.results, head)


def evidence_options(values: list[str]) -> dict[str, list[str]]:
    """``{mention type or "": options}`` of ``--evidence-options [TYPE=]OPTIONS``."""
    found = {}
    for value in values:
        kind, sep, rest = value.partition("=")
        if sep and kind in ("event", "entity"):
            found[kind] = shlex.split(rest)
        else:
            found[""] = shlex.split(value)
    return found


def write_head(path: Path, head: str) -> None:
    """Put ``head`` in place of the section's text before its first ``###`` subsection (all of it when it has
    none), keeping the subsections other scripts write."""
    text = path.read_text(encoding="utf-8")
    start = text.find(SECTION)
    if start < 0:
        write_section(path, head, SECTION)
        return
    after = text.find("\n## ", start + len(SECTION))
    end = len(text) if after < 0 else after + 1
    body = text[start:end]
    old_tables = [i for i in range(len(body)) if body.startswith("\n### ", i)]
    keep = ""
    for i in old_tables:  # the first subsection this script does not write
        title = body[i + 1:body.index("\n", i + 1)]
        if not any(title.startswith(f"### {name}:") for name in ("ECB+ events", "ECB+ entities", "MEANTIME")) \
                and ": test, " not in title:
            keep = body[i + 1:]
            break
    new_text = text[:start] + head.rstrip("\n") + "\n\n" + keep
    if not new_text.endswith("\n\n") and after >= 0:
        new_text = new_text.rstrip("\n") + "\n\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(new_text + text[end:], encoding="utf-8")
    tmp.replace(path)


if __name__ == "__main__":
    main()
