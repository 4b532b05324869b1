"""Every number of the README's score tables, recomputed from the models that ship with corefsearch.

From the vendored ECB+ archive and the shipped models only (``corefsearch models``; no training, no gold
information at query time), on the ECB+ event test queries (1,556, all 43 topics indexed, 15,812 sentence
passages) and test documents:

- retrieval: both BM25 rows (the paper's form: the mention and its sentence's named entities with RM3; and the
  mention's sentence over the field-weighted index), the hybrid (the shipped retriever's dense index + that BM25,
  interpolated, α 0.5), the hybrid re-ranked by the shipped reader (top 50, RRF), and the second round from the
  shipped detector's mentions of the top passages (N 10, w 2, similarity 0.9: ECB+ dev's choice), every run at
  depth 100; MRR@10, R@50, R@100 (trec definitions);
- raw text to clusters: ``detect`` with the shipped detector, then ``cluster --mentions predicted`` with lemma
  clustering and with the shipped event encoder, documents grouped by predicted topics, singletons dropped; the
  system reading whole documents (every sentence) and scored on ECB+'s validated sentences (the annotators'
  selection: the sentences whose annotation is complete; mentions of key and response outside them left out),
  beside the system given the validated sentences alone;
- the shipped models' own rows: the detector's strict span F1 on the test split's validated sentences, and the
  mention encoders on the gold mentions in the gold subtopics, singletons kept (an upper bound, labelled so).

Each step is a ``corefsearch`` command (what a user runs), kept in ``--work`` with its wall time, so an
interrupted run goes on where it stopped (``--fresh`` starts again). Prints the tables the README shows and the
time of every step; with ``--results``, also writes them into bench/RESULTS.md ("Headline, from the shipped
models").

Run: ``python bench/headline.py [--work work/headline] [--fresh] [--results bench/RESULTS.md]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("COREFSEARCH_QUIET", "1")

from bm25 import machine, markdown_table, write_section  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ECBPLUS = REPO / "data" / "ecbplus" / "ECBplus.tar.gz"
CLI = [sys.executable, "-m", "corefsearch.cli"]
SECTION = "## Headline, from the shipped models (bench/headline.py)"
DETECTOR, RETRIEVER, READER = "detector-ecbplus", "retriever-ecbplus", "reader-ecbplus"
EVENT_ENCODER, ENTITY_ENCODER = "event-encoder-ecbplus", "entity-encoder-ecbplus"
K = 100  # every run's depth: R@100 and the second round's first round are read from the same list
FIELDS = ["--query-format", "sentence", "--fields", "sentence=1,document=0.1"]
HYBRID = ["--retriever", "hybrid", *FIELDS, "--fusion", "interpolate", "--alpha", "0.5"]
SECOND_ROUND = ["--rounds", "2", "--candidates", "detected", "--expand", "10", "--expand-weight", "2",
                "--expand-min-similarity", "0.9", "--mention-encoder", EVENT_ENCODER]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Steps:
    """The commands of one run, each done once: its outputs kept in ``work``, its seconds in ``steps.json``."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.record = work / "steps.json"
        self.seconds: dict[str, float] = json.loads(self.record.read_text()) if self.record.is_file() else {}

    def run(self, name: str, done: Path, *command: str | Path) -> None:
        if name in self.seconds and done.exists():
            log(f"{name}: done before ({self.seconds[name]:.0f} s)")
            return
        words = [str(word) for word in command]
        log(f"{name}: {shlex.join(words[2:] if words[:2] == CLI[:2] else words)}")
        started = time.perf_counter()
        result = subprocess.run([*CLI, *words], cwd=REPO, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"{name} failed: {shlex.join(words)}\n{result.stdout[-2000:]}{result.stderr[-4000:]}")
        if not done.exists():
            raise SystemExit(f"{name}: {done} was not written")
        self.seconds[name] = time.perf_counter() - started
        self.record.write_text(json.dumps(self.seconds, indent=2) + "\n", encoding="utf-8")

    def output(self, *command: str | Path) -> str:
        """The stdout of a quick command (an evaluation), not recorded as a step."""
        words = [str(word) for word in command]
        result = subprocess.run([*CLI, *words], cwd=REPO, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"failed: {shlex.join(words)}\n{result.stderr[-4000:]}")
        return result.stdout


def subtopics_file(dataset: Path, out: Path) -> Path:
    """The ECB+ gold subtopic of every document as a ``--topics`` file (the grouping of the gold-mention rows)."""
    from corefsearch.cluster.agreement import ecbplus_subtopic
    from corefsearch.datasets.dataset import Dataset

    lines = {p.doc_id: ecbplus_subtopic(p.doc_id, p.topic) for p in Dataset(dataset).passages()}
    out.write_text("".join(f"{doc}\t{group}\n" for doc, group in sorted(lines.items())), encoding="utf-8")
    return out


def retrieval(steps: Steps) -> tuple[list[list[str]], list[list[str]]]:
    w = steps.work
    data, index, runs = w / "ecb-events", w / "index", w / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    queries, qrels = data / "queries" / "test.jsonl", data / "qrels" / "test.txt"
    steps.run("build the ECB+ event dataset", data / "manifest.json",
              "build-dataset", ECBPLUS, "--format", "ecbplus", "--out", data)
    steps.run("index it (Lucene, with fields)", index / "lucene", "index", data, "--out", index, "--fields")
    steps.run("index it (dense, the shipped retriever)", index / "dense", "index", data, "--out", index, "--dense",
              "--encoder", RETRIEVER)
    # The second round's candidates: the shipped detector's event mentions, stored in the dataset (`detect`).
    steps.run("detect the collection's event mentions", data / "predicted_mentions.jsonl",
              "detect", data, "--model", DETECTOR, "--mention-type", "event")
    search = ["search", "--index", index, "--queries", queries, "--k", str(K)]
    rows = [("BM25, the mention and its sentence's named entities, RM3 (the paper's form)", "bm25-rm3",
             ["--query-format", "mention+entities", "--rm3"]),
            ("BM25, the mention's sentence over the field-weighted index", "bm25-fields", FIELDS),
            ("hybrid: the shipped retriever + that BM25, interpolated", "hybrid", HYBRID),
            ("the hybrid + a second round from the shipped detector's mentions", "hybrid-second-round",
             [*HYBRID, *SECOND_ROUND]),
            ("the hybrid re-ranked by the shipped reader, fused with it by RRF", "hybrid-reader",
             [*HYBRID, "--reader", READER, "--rerank-fusion", "rrf"])]
    scores = {}
    for label, name, options in rows:
        steps.run(f"search: {name}", runs / f"{name}.trec", *search, "--out", runs / f"{name}.trec", *options)
        found = json.loads(steps.output("evaluate", runs / f"{name}.trec", "--qrels", qrels, "--output-format",
                                        "json"))
        scores[name] = (label, found[name])
    table = [[label, *(f"{100 * s[m]:.2f}" for m in ("MRR@10", "R@50"))]
             for name, (label, s) in scores.items() if name != "hybrid-second-round"]
    second = [[label, *(f"{100 * s[m]:.2f}" for m in ("MRR@10", "R@100"))]
              for name, (label, s) in scores.items() if name in ("hybrid", "hybrid-second-round")]
    return table, second


def validated_only(clusters: Path, whole: Path, validated: Path, out: Path) -> Path:
    """The lines of ``clusters`` (of the ``whole`` documents) whose sentence is one of the ``validated`` dataset's
    (ECB+'s validated sentences, where the annotation is complete), their passage ids made the validated
    dataset's: the response scored against those sentences' gold mentions. A sentence is matched by its document
    and its text (the two datasets number their passages each their own way)."""
    from corefsearch.datasets.dataset import Dataset

    by_text: dict[tuple[str, str], list[str]] = {}
    for passage in Dataset(validated).passages():
        by_text.setdefault((passage.doc_id, passage.text), []).append(passage.id)
    in_whole: dict[tuple[str, str], list[str]] = {}
    for passage in Dataset(whole).passages():
        in_whole.setdefault((passage.doc_id, passage.text), []).append(passage.id)
    # A sentence repeated word for word in one document is left out: which copy was validated cannot be told.
    to_validated = {ids[0]: by_text[key][0] for key, ids in in_whole.items()
                    if len(ids) == 1 and len(by_text.get(key, [])) == 1}
    lines = []
    for line in clusters.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["passage_id"] in to_validated:
            lines.append(json.dumps({**record, "passage_id": to_validated[record["passage_id"]]}) + "\n")
    out.write_text("".join(lines), encoding="utf-8")
    return out


def raw_text(steps: Steps) -> list[list[str]]:
    """Detected mentions clustered, CoNLL F1 with singletons dropped: the system reading whole documents (every
    sentence), scored on the validated sentences (key and response alike: elsewhere ECB+ leaves most mentions
    unannotated); and the system given the validated sentences alone, the field's ECB+ setting."""
    from corefsearch.evaluate.coref_files import evaluate_clusters

    w = steps.work
    validated, whole = w / "ecb-events-validated", w / "ecb-events-whole"
    steps.run("build the ECB+ validated event sentences", validated / "manifest.json", "build-dataset", ECBPLUS,
              "--format", "ecbplus", "--validated-only", "--chains", "all", "--out", validated)
    steps.run("build the ECB+ event documents, every sentence", whole / "manifest.json", "build-dataset", ECBPLUS,
              "--format", "ecbplus", "--chains", "all", "--out", whole)
    rows = []
    for label, data in (("whole documents (every sentence), scored on the validated sentences", whole),
                        ("the validated sentences alone (the annotators' selection)", validated)):
        steps.run(f"detect the event mentions: {data.name}", data / "predicted_mentions.jsonl",
                  "detect", data, "--model", DETECTOR, "--mention-type", "event")
        row = [label]
        for method, options in (("lemma", ["--method", "lemma"]),
                                ("encoder", ["--method", "encoder", "--model", EVENT_ENCODER])):
            out = w / "clusters" / f"raw-text-{data.name}-{method}.jsonl"
            out.parent.mkdir(parents=True, exist_ok=True)
            steps.run(f"cluster the detected mentions: {data.name}, {method}", out, "cluster", data, "--mentions",
                      "predicted", "--split", "test", "--scope", "predicted-topic", "--out", out, *options)
            scored = out if data == validated else validated_only(out, whole, validated,
                                                                      out.with_suffix(".validated.jsonl"))
            f1 = evaluate_clusters(scored, validated, split="test", singletons="drop").scores.conll_f1
            row.append(f"{100 * f1:.2f}")
        rows.append(row)
    return rows


def shipped_rows(steps: Steps) -> list[list[str]]:
    from corefsearch.evaluate.coref_files import evaluate_clusters
    from corefsearch.evaluate.mentions import evaluate_detection

    w = steps.work
    every = w / "ecb-all-validated"
    steps.run("build the ECB+ validated sentences, every mention", every / "manifest.json", "build-dataset",
              ECBPLUS, "--format", "ecbplus", "--validated-only", "--chains", "all", "--mention-type", "all",
              "--out", every)
    steps.run("detect their mentions", every / "predicted_mentions.jsonl", "detect", every, "--model", DETECTOR)
    strict = evaluate_detection(every, every, "test").scores["strict"]
    rows = [[DETECTOR, "strict span F1, ECB+ test validated sentences",
             f"events {100 * strict['event'].f1:.2f}, entities {100 * strict['entity'].f1:.2f}"]]
    entities = w / "ecb-entities-validated"
    steps.run("build the ECB+ validated entity sentences", entities / "manifest.json", "build-dataset", ECBPLUS,
              "--format", "ecbplus", "--validated-only", "--chains", "all", "--mention-type", "entity",
              "--out", entities)
    for model, data in ((EVENT_ENCODER, w / "ecb-events-validated"), (ENTITY_ENCODER, entities)):
        topics = subtopics_file(data, w / f"{data.name}.subtopics.tsv")
        out = w / "clusters" / f"gold-mentions-{model}.jsonl"
        steps.run(f"cluster the gold mentions: {model}", out, "cluster", data, "--split", "test", "--topics",
                  topics, "--method", "encoder", "--model", model, "--out", out)
        f1 = evaluate_clusters(out, data, split="test", singletons="keep").scores.conll_f1
        rows.append([model, "CoNLL F1, gold mentions (an upper bound), gold subtopics, singletons kept",
                     f"{100 * f1:.2f}"])
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=REPO / "work" / "headline")
    parser.add_argument("--fresh", action="store_true", help="Start again: remove --work first.")
    parser.add_argument("--results", type=Path, default=None, help="Also write the section into this RESULTS.md.")
    args = parser.parse_args(argv)
    if args.fresh:
        shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    steps = Steps(args.work)
    retrieval_rows, second = retrieval(steps)
    raw = raw_text(steps)
    models = shipped_rows(steps)
    wall = time.perf_counter() - started
    total = sum(steps.seconds.values())
    given = sys.argv[1:] if argv is None else argv
    lines = [SECTION, "",
             f"- Date: {dt.datetime.now():%Y-%m-%d %H:%M} (local time); the steps' time: {total / 60:.1f} min "
             f"(this invocation {wall / 60:.1f} min, steps done before reused)",
             *(f"- {key}: {value}" for key, value in machine().items()),
             f"- Command: `{shlex.join(['python', 'bench/headline.py', *given])}`",
             "- ECB+ events, test: 1,556 queries over all 43 topics (15,812 sentence passages), runs at depth "
             f"{K}; ×100, trec definitions. Models: the shipped ones only (`corefsearch models`); no gold "
             "information at query time.", "",
             "### Retrieval", "",
             markdown_table(["pipeline", "MRR@10", "R@50"], retrieval_rows, "lrr"), "",
             "### Second round (N 10, w 2, similarity 0.9; the shipped detector's mentions, stored by `detect`)", "",
             markdown_table(["run", "MRR@10", "R@100"], second, "lrr"), "",
             "### From raw text to clusters (ECB+ test events; documents grouped by predicted topics, the default "
             "grouping (MiniLM + TF-IDF, cut 0.64); CoNLL F1, singletons dropped)", "",
             markdown_table(["the system reads", "lemma", "mention encoder"], raw, "lrr"), "",
             "### The shipped models' own scores", "",
             markdown_table(["model", "score", "value"], models, "lll"), "",
             "### Steps", "",
             markdown_table(["step", "seconds"], [[name, f"{s:.0f}"] for name, s in steps.seconds.items()], "lr"),
             ""]
    section = "\n".join(lines)
    print(section)
    if args.results is not None:
        write_section(args.results, section, SECTION)


if __name__ == "__main__":
    main()
