"""Plain documents as users have them: the same collection in four layouts, and ECB+ test read from ``.txt`` files.

1. **Layouts.** ``bench/data/plain-events`` written four ways: title lines (as it is), no title lines (the text
   alone), one line per document (the text on one line, no title) and nested folders (``EVENT/NAME.txt``, title
   lines). Each is built (``build-dataset --format text``, defaults), its mentions detected with the shipped
   detector and clustered with the shipped event encoder (``--scope predicted-topic``); the table says whether the
   passages' texts, the detected spans and the clusters are the same as those of the title-line layout (documents
   matched by file name, so the nested ids ``fire/fire-1`` meet ``fire-1``).
2. **ECB+ whole documents from ``.txt`` files.** Each ECB+ test document (topics 36-45) is written as a ``.txt``
   file of every sentence (one a line, the tokens as the corpus gives them), then ``build-dataset --format text``
   (default sentences; ``--title none`` so that line 1, usually the headline, is read as text too: the default
   ``auto`` keeps a headline as the title, which is searched but not detected, so a row with it is given too),
   ``detect`` (shipped detector, events), ``cluster --mentions predicted --scope predicted-topic`` (lemma, and the
   shipped event encoder). Scored where the annotation is complete, on ECB+'s validated sentences (the annotators'
   selection): each detected span is mapped to the validated sentence that holds it (by character offsets in the
   document); spans outside them are left out, and so are the gold mentions outside them. Detection: strict span
   P/R/F1 (events, every chain and singleton); clustering: CoNLL F1, singletons dropped. Beside it, the system
   given the validated sentences alone (``build-dataset --format ecbplus --validated-only``). Wall time and peak
   memory (``/usr/bin/time``) of each step.

Run: ``python bench/plain_documents.py --work work/plain-documents [--layouts-only] [--results bench/RESULTS.md]``.
Resumable: a step whose output is in ``--work`` is not run again.
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
from headline import log  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PLAIN = REPO / "bench" / "data" / "plain-events"
ECBPLUS = REPO / "data" / "ecbplus" / "ECBplus.tar.gz"
CLI = [sys.executable, "-m", "corefsearch.cli"]
DETECTOR, EVENT_ENCODER = "detector-ecbplus", "event-encoder-ecbplus"
SECTION = "## Plain documents (bench/plain_documents.py)"
METHODS = {"lemma": ["--method", "lemma"], "encoder": ["--method", "encoder", "--model", EVENT_ENCODER]}


class Steps:
    """Each command once, its output kept in ``work``; its wall time and peak memory (``/usr/bin/time``) recorded."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.record = work / "steps.json"
        self.costs: dict[str, list[float]] = json.loads(self.record.read_text()) if self.record.is_file() else {}
        self.validated_build = ""

    def run(self, name: str, done: Path, *command: str | Path) -> None:
        if name in self.costs and done.exists():
            return
        words = [str(word) for word in command]
        log(f"{name}: corefsearch {shlex.join(words)}")
        timing = self.work / "time.txt"
        result = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", str(timing), *CLI, *words], cwd=REPO,
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"{name} failed: {shlex.join(words)}\n{result.stdout[-2000:]}{result.stderr[-4000:]}")
        seconds, kilobytes = timing.read_text().split()[-2:]
        self.costs[name] = [float(seconds), int(kilobytes) / 1024]
        self.record.write_text(json.dumps(self.costs, indent=2) + "\n", encoding="utf-8")


# --- 1. the same collection in four layouts -------------------------------------------------------------------


def write_layouts(root: Path) -> dict[str, Path]:
    """The plain-events collection as title lines, no title lines, one line per document and nested folders."""
    layouts = {name: root / name for name in ("title lines", "no title lines", "one line", "nested folders")}
    for folder in layouts.values():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    for path in sorted(PLAIN.glob("*.txt")):
        title, _, text = path.read_text(encoding="utf-8").partition("\n")
        text = text.strip()
        (layouts["title lines"] / path.name).write_text(f"{title}\n{text}\n", encoding="utf-8")
        (layouts["no title lines"] / path.name).write_text(f"{text}\n", encoding="utf-8")
        (layouts["one line"] / path.name).write_text(" ".join(text.split("\n")), encoding="utf-8")
        event = path.stem.split("-")[0]
        (layouts["nested folders"] / event).mkdir(exist_ok=True)
        (layouts["nested folders"] / event / path.name).write_text(f"{title}\n{text}\n", encoding="utf-8")
    return layouts


def _base(doc_id: str) -> str:
    return doc_id.rsplit("/", 1)[-1]


def layout_state(dataset: Path, clusters: Path) -> tuple[list, set, set]:
    """Passages (document name, text), detected spans and clusters of one layout, in names every layout shares."""
    from corefsearch.datasets.dataset import Dataset

    data = Dataset(dataset)
    passages = [(_base(p.doc_id), p.text) for p in data.passages()]
    where = {p.id: (_base(p.doc_id), p.text) for p in data.passages()}
    spans = {(*where[m.passage_id], m.start, m.end) for m in data.predicted_mentions()}
    groups: dict[str, set] = {}
    for line in clusters.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        groups.setdefault(record["cluster_id"], set()).add((*where[record["passage_id"]], record["start"],
                                                            record["end"]))
    return passages, spans, {frozenset(group) for group in groups.values()}


def layouts(steps: Steps) -> list[list[str]]:
    folders = write_layouts(steps.work / "layouts")
    states, rows = {}, []
    for name, folder in folders.items():
        slug = name.replace(" ", "-")
        dataset, clusters = steps.work / f"plain-{slug}", steps.work / f"plain-{slug}.clusters.jsonl"
        steps.run(f"build: {name}", dataset / "manifest.json", "build-dataset", folder, "--format", "text",
                  "--out", dataset, "--overwrite")
        steps.run(f"detect: {name}", dataset / "predicted_mentions.jsonl", "detect", dataset, "--model", DETECTOR,
                  "--mention-type", "event", "--overwrite")
        steps.run(f"cluster: {name}", clusters, "cluster", dataset, "--mentions", "predicted", "--scope",
                  "predicted-topic", "--out", clusters, *METHODS["encoder"])
        states[name] = layout_state(dataset, clusters)
        from corefsearch.datasets.dataset import Dataset

        read = Dataset(dataset).manifest["options"]["source"].get("read") or {}
        passages, spans, groups = states[name]
        same = [("same" if states[name][i] == states["title lines"][i] else "DIFFERENT") for i in range(3)]
        rows.append([name, f"{read.get('titled', 0)} / {read.get('untitled', 0)}", f"{len(passages):,}",
                     f"{len(spans):,}", f"{len(groups):,}", *same])
    return rows


# --- 2. ECB+ test from .txt files --------------------------------------------------------------------------------


def _offsets(text: str, pieces: list[str], where: str) -> list[int]:
    """The character offset in ``text`` of each of ``pieces``, found in order."""
    found, cursor = [], 0
    for piece in pieces:
        at = text.find(piece, cursor)
        if at < 0:
            raise SystemExit(f"{where}: passage {piece[:40]!r} not found in its document's text")
        found.append(at)
        cursor = at + len(piece)
    return found


def write_ecb_texts(whole: Path, out: Path) -> dict[str, str]:
    """Each test document of the ``whole`` ECB+ dataset as ``out/DOC.txt`` (its sentences, one a line); returns
    ``{doc_id: text}``."""
    from corefsearch.datasets.dataset import Dataset

    lines: dict[str, list[str]] = {}
    for passage in Dataset(whole).passages():
        if passage.split == "test":
            lines.setdefault(passage.doc_id, []).append(passage.text)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    texts = {doc: "\n".join(sentences) for doc, sentences in lines.items()}
    for doc, text in texts.items():
        (out / f"{doc}.txt").write_text(text + "\n", encoding="utf-8")
    return texts


def to_validated(records: list[dict], text_dataset: Path, validated: Path, texts: dict[str, str]) -> list[dict]:
    """``records`` (``passage_id``, ``start``, ``end`` in the passages of ``text_dataset``) in the validated
    sentences' passages, those outside them left out."""
    from corefsearch.datasets.dataset import Dataset

    def by_doc(dataset: Path, split: str | None) -> dict[str, list]:
        docs: dict[str, list] = {}
        for p in Dataset(dataset).passages():
            if p.doc_id in texts and (split is None or p.split == split):
                docs.setdefault(p.doc_id, []).append(p)
        return docs

    home: dict[str, tuple[str, int]] = {}  # text passage id -> (doc, offset in the document)
    for doc, passages in by_doc(text_dataset, None).items():
        for p, at in zip(passages, _offsets(texts[doc], [p.text for p in passages], doc), strict=True):
            home[p.id] = (doc, at)
    lines: dict[str, list[tuple[int, int, str]]] = {}  # doc -> (start, end, validated passage id)
    for doc, passages in by_doc(validated, "test").items():
        for p, at in zip(passages, _offsets(texts[doc], [p.text for p in passages], doc), strict=True):
            lines.setdefault(doc, []).append((at, at + len(p.text), p.id))
    mapped = []
    for record in records:
        doc, at = home[record["passage_id"]]
        start, end = at + record["start"], at + record["end"]
        for line_start, line_end, passage_id in lines.get(doc, []):
            if line_start <= start and end <= line_end:
                mapped.append({**record, "passage_id": passage_id, "start": start - line_start,
                               "end": end - line_start})
                break
    return mapped


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def ecb(steps: Steps, titles: list[str], clusters: bool = True) -> tuple[list[list[str]], list[list[str]]]:
    from corefsearch.evaluate.coref_files import evaluate_clusters
    from corefsearch.evaluate.mentions import evaluate_detection

    w = steps.work
    whole, validated = w / "ecb-events-whole", w / "ecb-events-validated"
    steps.run("ECB+: build every sentence (for the .txt files)", whole / "manifest.json", "build-dataset", ECBPLUS,
              "--format", "ecbplus", "--chains", "all", "--out", whole)
    steps.validated_build = "ECB+: build the validated sentences"
    steps.run(steps.validated_build, validated / "manifest.json", "build-dataset", ECBPLUS,
              "--format", "ecbplus", "--validated-only", "--chains", "all", "--out", validated)
    texts = write_ecb_texts(whole, w / "ecb-test-txt")
    quality, costs = [], []
    runs = [(f".txt files, --title {title}", w / f"ecb-txt-{title}", ["--title", title]) for title in titles]
    runs.append(("validated sentences alone (ecbplus --validated-only)", validated, None))
    for label, dataset, title in runs:
        names = [f"{label}: build", f"{label}: detect"]
        if title is not None:
            steps.run(names[0], dataset / "manifest.json", "build-dataset", w / "ecb-test-txt", "--format", "text",
                      *title, "--out", dataset, "--overwrite")
        steps.run(names[1], dataset / "predicted_mentions.jsonl", "detect", dataset, "--model", DETECTOR,
                  "--mention-type", "event")
        detected = dataset / "predicted_mentions.jsonl"
        if title is not None:
            detected = _write_jsonl(w / f"{dataset.name}.detected.validated.jsonl",
                                    to_validated(_jsonl(dataset / "predicted_mentions.jsonl"), dataset, validated,
                                                 texts))
        strict = evaluate_detection(detected, validated, "test", types=["event"]).scores["strict"]["event"]
        row = [label, f"{100 * strict.precision:.2f}", f"{100 * strict.recall:.2f}", f"{100 * strict.f1:.2f}"]
        for method, options in METHODS.items() if clusters else ():
            out = w / f"{dataset.name}.{method}.clusters.jsonl"
            names.append(f"{label}: cluster {method}")
            split = ["--split", "test"] if title is None else ["--split", "all"]
            steps.run(names[-1], out, "cluster", dataset, "--mentions", "predicted", *split, "--scope",
                      "predicted-topic", "--out", out, *options)
            scored = out if title is None else _write_jsonl(
                out.with_suffix(".validated.jsonl"), to_validated(_jsonl(out), dataset, validated, texts))
            f1 = evaluate_clusters(scored, validated, split="test", singletons="drop").scores.conll_f1
            row.append(f"{100 * f1:.2f}")
        quality.append(row)
        for name in names if title is not None else [steps.validated_build, *names[1:]]:
            seconds, megabytes = steps.costs[name]
            costs.append([name, f"{seconds:.0f}", f"{megabytes:,.0f}"])
    return quality, costs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=REPO / "work" / "plain-documents")
    parser.add_argument("--layouts-only", action="store_true", help="part 1 only")
    parser.add_argument("--titles", default="none,auto", help="the --title modes of the ECB+ .txt rows")
    parser.add_argument("--no-clusters", action="store_true", help="ECB+: build and detect only")
    parser.add_argument("--results", type=Path, help="write the section into this RESULTS.md")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    steps = Steps(args.work)
    layout_rows = layouts(steps)
    out = [SECTION, "",
           f"- Date: {dt.date.today().isoformat()}; run time {time.time() - started:.0f} s (steps done before are "
           "not re-run). Shipped models: `detector-ecbplus` (events), `event-encoder-ecbplus`; `cluster --scope "
           "predicted-topic` (its default grouping).",
           *(f"- {key}: {value}" for key, value in machine().items()),
           f"- Command: `python bench/plain_documents.py {' '.join(shlex.quote(a) for a in (argv or sys.argv[1:]))}`",
           "", "The same collection (bench/data/plain-events, 33 documents) in four layouts, each built with "
           "`build-dataset --format text` and its defaults; compared with the title-line layout (documents matched by "
           "file name):", "",
           markdown_table(["layout", "titles taken / files read whole", "passages", "detected", "clusters",
                           "passages' texts", "detected spans", "clusters"], layout_rows, ["l", *"r" * 4, *"l" * 3]),
           ""]
    if not args.layouts_only:
        quality, costs = ecb(steps, [t for t in args.titles.split(",") if t], clusters=not args.no_clusters)
        out += ["ECB+ test (topics 36-45, every document), events, from `.txt` files to clusters; scored on the "
                "validated sentences (the annotators' selection, where the annotation is complete: detected and gold "
                "mentions outside them left out). Detection: strict span match; clustering: CoNLL F1, singletons "
                "dropped, predicted topics:", "",
                markdown_table(["input", "detection P", "R", "F1", "CoNLL F1 lemma", "CoNLL F1 encoder"], quality,
                               ["l", *"r" * 5]), "",
                "Cost of each step (2 cores; wall time, peak resident memory of the command):", "",
                markdown_table(["step", "seconds", "peak MB"], costs, ["l", "r", "r"]), ""]
    text = "\n".join(out)
    print(text)
    if args.results is not None:
        write_section(args.results, text, SECTION)


if __name__ == "__main__":
    main()
