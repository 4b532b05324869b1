"""Check that a change leaves every output of corefsearch as it was, byte for byte.

Why: a restructuring (modules moved or split, code tidied) must not change behaviour. The tests
check properties of the outputs; this checks that every file the command line writes is the same
before and after the change.

    python scripts/same_outputs.py --before REV [--after REV_OR_FOLDER] [--keep DIR]

``--before`` is a git revision of this repository, exported with ``git archive`` (the repository
and its worktrees are left as they are); ``--after`` is a revision or a folder holding
``src/corefsearch`` (default: this working tree, uncommitted changes included). The same fixed
pipeline runs once with each source tree, as ``python -m corefsearch.cli ...`` subprocesses of the
python running this script, with ``PYTHONPATH=TREE/src``, models on one CPU thread:

- build-dataset: five ECB+ topics of ``data/ecbplus/ECBplus.tar.gz`` (2 dev, 3 and 4 train, 36
  and 37 test; ``--chains all``), and a small generic corpus written here;
- index: Lucene (with ``--fields``), and ``--dense`` with a tiny randomly initialised BERT that is
  written once per comparison (the same folder, the same bytes, for both trees);
- search: BM25 with the query formats mention (``--save-topics``) and mention+entities, BM25
  ``--fields``, dense and hybrid;
- train retriever, reader and clusterer from the tiny BERT for a few steps (seed 13, one thread);
- ``index --dense`` with the trained retriever and a dense search on it; ``search --reader`` (run
  and spans); ``cluster`` lemma and encoder (clusters JSONL and ``--conll``); ``evaluate`` in JSON
  (with the per-query CSV and the curves PNG) of the runs, the spans and both clusterings; ``add``
  of two documents to the generic dataset and to its Lucene and dense indexes.

Both pipelines run in the same folder, renamed when done, so that the absolute paths the outputs
record are the same. Every file is then compared byte for byte, except the few fields that differ
between two runs of the same source tree (dates, durations, Lucene's random ids and flush time):
the rules of ``NORMALISED``, each replacing only those fields by a placeholder, named in the table.
Model weights, vectors and FAISS indexes come out bit for bit the same and are compared as bytes.
Console output (with timings) is not compared; ``evaluate``'s JSON is. When the two trees'
corefsearch versions differ, the fields that record the version are set aside too, and the table
says so.

Exit status: 0 when every file is the same, 1 when some differ, 2 when the comparison could not be
made (one line says why; a failed step names its log, kept with ``--keep DIR``, which also keeps the
inputs and both output folders). About five minutes on two CPU cores; ``--before HEAD`` on a clean
tree compares the tree with itself.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import string
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ECBPLUS_TARBALL = ROOT / "data" / "ecbplus" / "ECBplus.tar.gz"
ECBPLUS_TOPICS = ("2", "3", "4", "36", "37")
TINY_BERT_SEED = 0
TINY_BERT_WORDS = 1500
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


class ComparisonError(Exception):
    """The comparison could not be made (a bad revision, a failed step); printed as one line."""


# --- inputs shared by both trees -------------------------------------------------------------------

NEWS_DOCUMENTS: list[dict[str, Any]] = [
    {"doc_id": "flood-1", "title": "River floods Dayton", "topic": "flood",
     "text": "Torrential rain swept across Ohio on Tuesday. The Great Miami River overflowed its levees in Dayton, "
             "flooding the downtown area. Mayor Nan Whaley said hundreds of residents were evacuated. The National "
             "Guard was deployed on Wednesday."},
    {"doc_id": "flood-2", "title": "Dayton cleans up", "topic": "flood",
     "text": "Recovery began on Friday in Dayton. The flood, the worst the city has seen in a century, left "
             "thousands without power. Evacuated residents returned to their homes."},
    {"doc_id": "quake-1", "title": "Quake hits California", "topic": "quake",
     "text": "A magnitude 6.4 earthquake struck northern California early Sunday. No deaths were reported after "
             "the quake, according to the county sheriff."},
    {"doc_id": "quake-2", "topic": "quake",
     "text": "Aftershocks rattled Eureka on Monday. Sunday's earthquake damaged a bridge on Highway 101."},
    {"doc_id": "fire-1", "title": "Warehouse fire in Leeds", "topic": "fire",
     "text": "A fire destroyed a warehouse in Leeds overnight. Firefighters battled the blaze for six hours.\n"
             "Police arrested a man on suspicion of arson on Thursday."},
    {"doc_id": "fire-2", "title": "Arrest after Leeds blaze", "topic": "fire",
     "text": "A 34-year-old man was arrested after the warehouse fire. The blaze started shortly after midnight, "
             "fire crews said."},
]
NEWS_ADDED_DOCUMENTS: list[dict[str, Any]] = [
    {"doc_id": "flood-3", "title": "Levees to be rebuilt", "topic": "flood",
     "text": "Ohio will rebuild the levees that failed when the Great Miami River overflowed. The flooding cost "
             "the city millions."},
    {"doc_id": "fire-3", "topic": "fire",
     "text": "The man arrested over the Leeds warehouse fire appeared in court on Monday."},
]
# (mention_id, doc_id, phrase, cluster_id, type); each phrase occurs once in its document.
NEWS_MENTIONS: list[tuple[str, str, str, str, str]] = [
    ("overflowed", "flood-1", "overflowed", "dayton-flood", "event"),
    ("flooding", "flood-1", "flooding", "dayton-flood", "event"),
    ("evacuated", "flood-1", "evacuated", "evacuation", "event"),
    ("deployed", "flood-1", "deployed", "guard-deployment", "event"),
    ("dayton", "flood-1", "Dayton,", "dayton", "entity"),
    ("flood", "flood-2", "flood,", "dayton-flood", "event"),
    ("evacuated-2", "flood-2", "Evacuated", "evacuation", "event"),
    ("dayton-2", "flood-2", "Dayton.", "dayton", "entity"),
    ("earthquake", "quake-1", "earthquake", "ca-quake", "event"),
    ("quake", "quake-1", "quake,", "ca-quake", "event"),
    ("earthquake-2", "quake-2", "earthquake", "ca-quake", "event"),
    ("aftershocks", "quake-2", "Aftershocks", "aftershocks", "event"),
    ("rattled", "quake-2", "rattled", "aftershocks", "event"),
    ("fire", "fire-1", "fire", "leeds-fire", "event"),
    ("blaze", "fire-1", "blaze", "leeds-fire", "event"),
    ("arrested", "fire-1", "arrested", "leeds-arrest", "event"),
    ("fire-2", "fire-2", "fire.", "leeds-fire", "event"),
    ("blaze-2", "fire-2", "blaze", "leeds-fire", "event"),
    ("arrested-2", "fire-2", "arrested", "leeds-arrest", "event"),
]
NEWS_ADDED_MENTIONS: list[tuple[str, str, str, str, str]] = [
    ("overflowed-3", "flood-3", "overflowed", "dayton-flood", "event"),
    ("flooding-3", "flood-3", "flooding", "dayton-flood", "event"),
    ("rebuild", "flood-3", "rebuild", "levee-rebuild", "event"),
    ("arrested-3", "fire-3", "arrested", "leeds-arrest", "event"),
    ("fire-3", "fire-3", "fire", "leeds-fire", "event"),
]


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")


def write_generic_corpus(folder: Path, documents: list[dict[str, Any]],
                         mentions: list[tuple[str, str, str, str, str]]) -> Path:
    """``corpus.jsonl`` and ``mentions.jsonl`` (character offsets) of the generic format in ``folder``."""
    texts = {document["doc_id"]: document["text"] for document in documents}
    records = []
    for mention_id, doc_id, phrase, cluster_id, kind in mentions:
        text = texts[doc_id]
        if text.count(phrase) != 1:
            raise ComparisonError(f"internal: {phrase!r} must occur once in {doc_id}")
        start = text.index(phrase)
        records.append({"mention_id": mention_id, "doc_id": doc_id, "start": start,
                        "end": start + len(phrase.rstrip(",.")), "cluster_id": cluster_id, "type": kind})
    _write_jsonl(folder / "corpus.jsonl", documents)
    _write_jsonl(folder / "mentions.jsonl", records)
    return folder


def extract_ecbplus_topics(tarball: Path, out: Path, topics: tuple[str, ...]) -> Path:
    """An ECB+ XML folder (``out/ECB+/<topic>/*.xml``) holding only ``topics`` of the tarball."""
    if not tarball.is_file():
        raise ComparisonError(f"{tarball}: no such file (the vendored ECB+ corpus)")
    with tarfile.open(tarball, "r:gz") as archive:
        for member in archive:
            parts = member.name.split("/")
            if member.isfile() and len(parts) == 3 and parts[1] in topics and parts[2].endswith(".xml"):
                handle = archive.extractfile(member)
                if handle is None:
                    raise ComparisonError(f"{tarball}: cannot read {member.name}")
                target = out / "ECB+" / parts[1] / parts[2]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(handle.read())
    return out


def frequent_words(folder: Path, n: int) -> list[str]:
    """The ``n`` most frequent lower-cased words of the XML token texts under ``folder``."""
    counts: Counter[str] = Counter()
    for path in sorted(folder.rglob("*.xml")):
        for token in re.findall(r"<token[^>]*>([^<]*)</token>", path.read_text(encoding="utf-8")):
            counts.update(re.findall(r"[a-z0-9]+", token.lower()))
    return [word for word, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]]


def save_tiny_bert(folder: Path, words: list[str], seed: int) -> Path:
    """A 2-layer, 32-wide BERT with random weights (seeded) and a character + word WordPiece
    vocabulary, saved with its tokenizer as a Hugging Face folder."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()

    characters = list(string.ascii_lowercase + string.digits + string.punctuation)
    vocab = list(dict.fromkeys(SPECIAL_TOKENS + characters + ["##" + c for c in characters] + words))
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)})
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=256)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@dataclass(frozen=True)
class Inputs:
    ecbplus: Path
    news: Path
    news_added: Path
    tiny_bert: Path


def write_inputs(folder: Path) -> Inputs:
    ecbplus = extract_ecbplus_topics(ECBPLUS_TARBALL, folder / "ecbplus", ECBPLUS_TOPICS)
    news = write_generic_corpus(folder / "news", NEWS_DOCUMENTS, NEWS_MENTIONS)
    news_added = write_generic_corpus(folder / "news-added", NEWS_ADDED_DOCUMENTS, NEWS_ADDED_MENTIONS)
    tiny_bert = save_tiny_bert(folder / "tiny-bert", frequent_words(ecbplus, TINY_BERT_WORDS), TINY_BERT_SEED)
    return Inputs(ecbplus, news, news_added, tiny_bert)


def tree_digest(folder: Path) -> str:
    """A checksum of every file (path and bytes) under ``folder``."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


# --- the pipeline ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    name: str
    args: list[str]
    stdout: str | None = None  # output file (relative to the output folder) that receives stdout


def pipeline(inputs: Inputs, out: Path) -> list[Step | Callable[[Path], None]]:
    """The fixed pipeline, every output under ``out``. A callable is a step of this script's own
    (it writes a file the next command reads)."""
    ecb, index, runs = str(out / "ecb"), str(out / "index"), out / "runs"
    test = str(out / "ecb" / "queries" / "test.jsonl")
    qrels = str(out / "ecb" / "qrels" / "test.txt")
    bert = str(inputs.tiny_bert)
    cpu = ["--device", "cpu"]
    train = ["--base-model", bert, "--epochs", "1", "--seed", "13", "--threads", "1", "--log-every", "0", *cpu]

    def train_dev_queries(folder: Path) -> None:
        queries = folder / "ecb" / "queries"
        runs_folder = folder / "runs"
        runs_folder.mkdir(parents=True, exist_ok=True)
        (runs_folder / "train-dev.queries.jsonl").write_bytes(
            (queries / "train.jsonl").read_bytes() + (queries / "dev.jsonl").read_bytes())

    return [
        Step("build-dataset ecbplus", ["build-dataset", str(inputs.ecbplus), "--format", "ecbplus",
                                       "--chains", "all", "--out", ecb]),
        Step("build-dataset generic", ["build-dataset", str(inputs.news), "--format", "generic",
                                       "--split-ratios", "0.5,0.25,0.25", "--out", str(out / "news")]),
        Step("index lucene", ["index", ecb, "--out", index, "--threads", "1", "--fields"]),
        Step("index --dense tiny BERT", ["index", ecb, "--out", index, "--dense", "--encoder", bert,
                                         "--batch-size", "32", *cpu]),
        Step("search bm25 mention", ["search", "--index", index, "--queries", test, "--out",
                                     str(runs / "bm25-mention.trec"), "--k", "100", "--query-format", "mention",
                                     "--threads", "1", "--save-topics", str(runs / "bm25-mention.topics.tsv")]),
        Step("search bm25 mention+entities", ["search", "--index", index, "--queries", test, "--out",
                                              str(runs / "bm25-entities.trec"), "--k", "100", "--query-format",
                                              "mention+entities", "--threads", "1"]),
        Step("search bm25 fields", ["search", "--index", index, "--queries", test, "--out",
                                    str(runs / "bm25-fields.trec"), "--k", "100", "--query-format", "mention",
                                    "--fields", "sentence=1,title=0.5,document=0.2", "--threads", "1"]),
        Step("search dense", ["search", "--index", index, "--queries", test, "--out", str(runs / "dense.trec"),
                              "--k", "100", "--retriever", "dense", *cpu]),
        Step("search hybrid", ["search", "--index", index, "--queries", test, "--out", str(runs / "hybrid.trec"),
                               "--k", "100", "--retriever", "hybrid", "--threads", "1", *cpu]),
        Step("train retriever", ["train", "retriever", ecb, "--out", str(out / "retriever"), "--index", index,
                                 *train, "--batch-size", "8", "--max-steps", "4", "--max-query-len", "32",
                                 "--max-passage-len", "48", "--hard-negatives", "5", "--dev-max-queries", "20"]),
        train_dev_queries,
        Step("search bm25 train+dev", ["search", "--index", index, "--queries",
                                       str(runs / "train-dev.queries.jsonl"), "--out",
                                       str(runs / "bm25-train-dev.trec"), "--k", "20", "--query-format", "mention",
                                       "--threads", "1"]),
        Step("train reader", ["train", "reader", ecb, "--run", str(runs / "bm25-train-dev.trec"), "--out",
                              str(out / "reader"), *train, "--batch-size", "2", "--max-steps", "3", "--negatives",
                              "3", "--negatives-from", "20", "--max-length", "96", "--max-query-len", "32",
                              "--doc-stride", "48", "--hidden", "16", "--max-train-queries", "20",
                              "--dev-max-queries", "10", "--dev-rerank-k", "10"]),
        Step("search --reader", ["search", "--index", index, "--queries", test, "--out",
                                 str(runs / "reader.trec"), "--k", "20", "--query-format", "mention", "--threads", "1",
                                 "--reader", str(out / "reader"), "--rerank-k", "10", *cpu]),
        Step("index --dense retriever", ["index", ecb, "--out", str(out / "index-retriever"), "--dense",
                                         "--encoder", str(out / "retriever"), "--batch-size", "32", *cpu]),
        Step("search dense retriever", ["search", "--index", str(out / "index-retriever"), "--queries", test,
                                        "--out", str(runs / "dense-retriever.trec"), "--k", "100",
                                        "--retriever", "dense", *cpu]),
        Step("train clusterer", ["train", "clusterer", ecb, "--out", str(out / "clusterer"), *train,
                                 "--batch-size", "8", "--max-steps", "4", "--hard-negatives-k", "3"]),
        Step("cluster lemma", ["cluster", ecb, "--method", "lemma", "--out", str(out / "clusters" / "lemma.jsonl"),
                               "--conll", str(out / "clusters" / "lemma.conll")]),
        Step("cluster encoder", ["cluster", ecb, "--method", "encoder", "--model", str(out / "clusterer"),
                                 "--out", str(out / "clusters" / "encoder.jsonl"),
                                 "--conll", str(out / "clusters" / "encoder.conll"), *cpu]),
        Step("evaluate runs", ["evaluate", *(str(runs / f"{name}.trec") for name in (
            "bm25-mention", "bm25-entities", "bm25-fields", "dense", "hybrid", "dense-retriever", "reader")),
                               "--qrels", qrels, "--output-format", "json",
                               "--per-query", str(out / "evaluation" / "runs.per-query.csv"),
                               "--plot", str(out / "evaluation" / "runs.curves.png")],
             stdout="evaluation/runs.json"),
        Step("evaluate spans", ["evaluate", str(runs / "reader.trec"), "--qrels", qrels, "--spans",
                                str(runs / "reader.trec.spans.jsonl"), "--dataset", ecb, "--output-format", "json"],
             stdout="evaluation/reader-spans.json"),
        Step("evaluate clusters lemma", ["evaluate", "--clusters", str(out / "clusters" / "lemma.jsonl"),
                                         "--dataset", ecb, "--output-format", "json"],
             stdout="evaluation/clusters-lemma.json"),
        Step("evaluate clusters encoder", ["evaluate", "--clusters", str(out / "clusters" / "encoder.jsonl"),
                                           "--dataset", ecb, "--output-format", "json"],
             stdout="evaluation/clusters-encoder.json"),
        Step("index generic lucene", ["index", str(out / "news"), "--out", str(out / "news-index"),
                                      "--threads", "1"]),
        Step("index generic dense", ["index", str(out / "news"), "--out", str(out / "news-index"), "--dense",
                                     "--encoder", bert, *cpu]),
        Step("add", ["add", str(out / "news"), "--corpus", str(inputs.news_added), "--index",
                     str(out / "news-index"), "--threads", "1", *cpu]),
    ]


def tree_env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"PYTHONPATH": str(tree / "src"), "COREFSEARCH_QUIET": "1", "OMP_NUM_THREADS": "1",
                "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
    return env


def tree_version(tree: Path) -> str:
    """corefsearch's version in ``tree``; an error unless ``python -m corefsearch.cli`` with this tree's
    PYTHONPATH runs the tree's own code."""
    probe = subprocess.run([sys.executable, "-c", "import corefsearch.cli, corefsearch; "
                            "print(corefsearch.__file__); print(corefsearch.__version__)"],
                           env=tree_env(tree), capture_output=True, text=True, cwd=tree)
    if probe.returncode != 0:
        last = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else f"exit {probe.returncode}"
        raise ComparisonError(f"cannot import corefsearch.cli from {tree / 'src'}: {last}")
    module, version = probe.stdout.strip().splitlines()[-2:]
    if not Path(module).resolve().is_relative_to((tree / "src").resolve()):
        raise ComparisonError(f"PYTHONPATH={tree / 'src'} imports corefsearch from {module}, not from that tree: "
                              f"this python's installed corefsearch takes precedence over PYTHONPATH; run the "
                              f"script with a python where it does not (corefsearch not installed, or "
                              f"installed with `pip install -e .`)")
    return version


def run_pipeline(label: str, tree: Path, inputs: Inputs, out: Path, logs: Path) -> float:
    """Run every step with ``tree``'s code into ``out``; the seconds it took."""
    out.mkdir(parents=True)
    logs.mkdir(parents=True)
    env = tree_env(tree)
    started = time.perf_counter()
    steps = pipeline(inputs, out)
    for number, step in enumerate(steps, 1):
        if not isinstance(step, Step):
            step(out)
            continue
        log = logs / f"{number:02d}-{re.sub(r'[^a-z0-9]+', '-', step.name.lower()).strip('-')}.log"
        began = time.perf_counter()
        command = [sys.executable, "-m", "corefsearch.cli", *step.args]
        with open(log, "w", encoding="utf-8") as stderr:
            if step.stdout is not None:
                target = out / step.stdout
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "wb") as stdout:
                    done = subprocess.run(command, env=env, cwd=out, stdout=stdout, stderr=stderr)
            else:
                done = subprocess.run(command, env=env, cwd=out, stdout=stderr, stderr=subprocess.STDOUT)
        print(f"  [{label}] {number:2d}/{len(steps)} {step.name:<30} {time.perf_counter() - began:6.1f} s",
              file=sys.stderr, flush=True)
        if done.returncode != 0:
            tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-15:]
            raise ComparisonError(f"[{label}] step '{step.name}' failed (exit {done.returncode}); its log is "
                                  f"{log}:\n    " + "\n    ".join(tail) + "\n  the command: " + " ".join(command))
    return time.perf_counter() - started


# --- the source trees ------------------------------------------------------------------------------


def git(*args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True)
    except FileNotFoundError:
        raise ComparisonError("git is not installed (needed to export a revision)") from None


def export_revision(revision: str, dest: Path) -> tuple[Path, str]:
    """``src/`` of ``revision`` exported into ``dest`` (``git archive``); the folder and the commit."""
    found = git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    if found.returncode != 0:
        raise ComparisonError(f"{revision!r} is not a commit of the repository {ROOT} (nor an existing folder)")
    commit = found.stdout.decode().strip()
    archive = git("archive", "--format=tar", commit, "src")
    if archive.returncode != 0:
        raise ComparisonError(f"git archive {commit} src failed: {archive.stderr.decode().strip()}")
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout), mode="r:") as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.10.12+, 3.11.4+
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)  # this repository's own archive
    if not (dest / "src" / "corefsearch" / "__init__.py").is_file():
        raise ComparisonError(f"{revision} ({commit[:12]}) has no src/corefsearch package")
    return dest, commit


def source_tree(spec: str | None, dest: Path) -> tuple[Path, str]:
    """The source tree of ``--before``/``--after``: a folder with ``src/corefsearch`` as it is, or a
    revision exported into ``dest``; with a description for the report."""
    if spec is None:
        return ROOT, f"working tree {ROOT}"
    folder = Path(spec)
    if folder.is_dir():
        if not (folder / "src" / "corefsearch" / "__init__.py").is_file():
            raise ComparisonError(f"{folder}: no src/corefsearch package in this folder")
        return folder.resolve(), f"folder {folder.resolve()}"
    tree, commit = export_revision(spec, dest)
    return tree, f"{spec} ({commit[:12]})"


# --- comparison ------------------------------------------------------------------------------------


class NormalisationError(Exception):
    """A file a rule covers is not laid out as the rule expects (it is then reported as differing)."""


@dataclass(frozen=True)
class Normalisation:
    """A narrow rule: in the files whose path (relative to the output folder) matches ``pattern``,
    the fields that differ between two runs of the same source tree are replaced by a placeholder
    before the comparison. ``apply`` gets the file's bytes and its path (a Lucene file needs its
    folder's other files)."""

    name: str
    pattern: str
    fields: str
    apply: Callable[[bytes, Path], bytes]


PLACEHOLDER = "<normalised>"


def json_fields(*paths: str) -> Callable[[bytes, Path], bytes]:
    """The JSON document with the values at ``paths`` (dotted; ``*`` is every item of a list)
    replaced by a placeholder where present: a key that appears or goes is still a difference, and
    the order of the keys is kept."""

    def replace(node: Any, parts: list[str]) -> None:
        head, rest = parts[0], parts[1:]
        if head == "*":
            for item in node if isinstance(node, list) else []:
                replace(item, rest)
        elif isinstance(node, dict) and head in node:
            if rest:
                replace(node[head], rest)
            else:
                node[head] = PLACEHOLDER

    def apply(data: bytes, path: Path) -> bytes:
        try:
            document = json.loads(data)
        except ValueError as err:
            raise NormalisationError(f"not JSON ({err})") from None
        for dotted in paths:
            replace(document, dotted.split("."))
        return json.dumps(document, indent=1, ensure_ascii=False).encode()

    return apply


CARD_CREATED = re.compile(rb"(?m)^(Device: .*; created )\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d(;)")


def model_card(data: bytes, path: Path) -> bytes:
    """A model card (README.md) without the creation time of its "Device: ...; created ...;" line
    and the last column (seconds) of its dev-curve table."""
    data, found = CARD_CREATED.subn(rb"\g<1>" + PLACEHOLDER.encode() + rb"\g<2>", data)
    if found != 1:
        raise NormalisationError("no 'Device: ...; created TIME;' line")
    lines = data.split(b"\n")
    in_curve = False
    for i, line in enumerate(lines):
        if line.startswith(b"|") and line.rstrip().endswith(b"| seconds |"):
            in_curve = True
        elif in_curve and line.startswith(b"|") and not line.startswith(b"|---"):
            cells = line.rstrip().rstrip(b"|").split(b"|")
            lines[i] = b"|".join([*cells[:-1], b" " + PLACEHOLDER.encode() + b" "]) + b"|"
        elif in_curve and not line.startswith(b"|"):
            in_curve = False
    return b"\n".join(lines)


# Lucene (9.x, Pyserini's) writes a random 16-byte id into every file's header (StringHelper.randomId;
# the segment's id, the commit's in segments_N, where each segment also has a second random id),
# a CRC32 footer over the bytes, and in each segment's .si the "diagnostics" map with the time of
# the flush, in an order that changes from one JVM to the next (an immutable Map.of, seeded per JVM).
LUCENE_HEADER = b"\x3f\xd7\x6c\x17"
LUCENE_FOOTER = b"\xc0\x28\x93\xe8"
LUCENE_ID_LENGTH = 16


class LuceneBytes:
    """A cursor over a Lucene file: the codec header, VInts, strings, maps and sets of strings."""

    def __init__(self, data: bytes, name: str) -> None:
        self.data, self.name, self.at = data, name, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise NormalisationError(f"{self.name}: unexpected end of a Lucene file")
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def vint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def string(self) -> str:
        return self.take(self.vint()).decode("utf-8")

    def strings(self, count: int) -> list[str]:
        return [self.string() for _ in range(count)]

    def header(self, codec: str) -> bytes:
        """The id of the codec header that must start here, for ``codec``."""
        if self.take(4) != LUCENE_HEADER or self.string() != codec:
            raise NormalisationError(f"{self.name}: not a {codec} file of a known layout")
        self.take(4)  # version
        object_id = self.take(LUCENE_ID_LENGTH)
        self.take(self.take(1)[0])  # suffix
        return object_id

    def at_footer(self) -> bool:
        return self.at == len(self.data) - 16 and self.data[self.at:self.at + 4] == LUCENE_FOOTER


def lucene_commit_ids(data: bytes, name: str) -> dict[bytes, str]:
    """The random ids of segments_N: the commit's and, for each segment, its id and its commit
    info's id (Lucene 9's SegmentInfos layout; big-endian fixed-width numbers)."""
    reader = LuceneBytes(data, name)
    ids = {reader.header("segments"): "commit"}
    for _ in range(4):  # Lucene version (major, minor, bugfix), index created version
        reader.vint()
    reader.take(8)  # version
    reader.vint()  # counter
    segments = int.from_bytes(reader.take(4), "big")
    if segments:
        for _ in range(3):  # min segment version
            reader.vint()
    for _ in range(segments):
        segment = reader.string()
        ids[reader.take(LUCENE_ID_LENGTH)] = f"<segment{segment}>"
        reader.string()  # codec
        reader.take(8 + 4 + 8 + 8 + 4)  # del gen, del count, field infos gen, doc values gen, soft del count
        if reader.take(1) == b"\x01":
            ids[reader.take(LUCENE_ID_LENGTH)] = f"<commit{segment}>"
        reader.strings(reader.vint())  # field infos files
        for _ in range(int.from_bytes(reader.take(4), "big")):  # doc values updates files
            reader.take(4)
            reader.strings(reader.vint())
    reader.strings(2 * reader.vint())  # user data
    if not reader.at_footer():
        raise NormalisationError(f"{name}: not a segments file of a known layout")
    return ids


_lucene_ids_cache: dict[Path, dict[bytes, str]] = {}


def lucene_ids(folder: Path) -> dict[bytes, str]:
    """Every random id of the Lucene index in ``folder``, with a name that is the same in both runs."""
    if folder not in _lucene_ids_cache:
        ids: dict[bytes, str] = {}
        for path in sorted(folder.iterdir()):
            data = path.read_bytes() if path.is_file() else b""
            if path.name.startswith("segments_"):
                ids.update(lucene_commit_ids(data, path.name))
            elif data.startswith(LUCENE_HEADER):
                reader = LuceneBytes(data, path.name)
                reader.take(4)
                reader.string()
                reader.take(4)
                ids.setdefault(reader.take(LUCENE_ID_LENGTH), f"<segment_{path.name.split('.')[0].split('_')[1]}>")
        _lucene_ids_cache[folder] = ids
    return _lucene_ids_cache[folder]


def lucene_segment_info(data: bytes, name: str) -> bytes:
    """A .si file (Lucene99SegmentInfoFormat) with its diagnostics map sorted and its flush time dropped."""
    reader = LuceneBytes(data, name)
    reader.header("Lucene90SegmentInfo")
    reader.take(12)  # version
    if reader.take(1) == b"\x01":
        reader.take(12)  # min version
    reader.take(4 + 1 + 1)  # max doc, compound file, has blocks
    start = reader.at
    entries = reader.strings(2 * reader.vint())
    diagnostics = dict(zip(entries[::2], entries[1::2], strict=True))
    end = reader.at
    reader.strings(reader.vint())  # files
    reader.strings(2 * reader.vint())  # attributes
    if reader.vint() != 0 or not reader.at_footer():  # no index sort
        raise NormalisationError(f"{name}: not a segment info file of a known layout")
    if "timestamp" not in diagnostics:
        raise NormalisationError(f"{name}: no timestamp in the segment's diagnostics")
    diagnostics["timestamp"] = PLACEHOLDER
    canonical = json.dumps(sorted(diagnostics.items())).encode()
    return data[:start] + canonical + data[end:]


def lucene_file(data: bytes, path: Path) -> bytes:
    for object_id, label in lucene_ids(path.parent).items():
        data = data.replace(object_id, label.encode().ljust(LUCENE_ID_LENGTH, b"-")[:LUCENE_ID_LENGTH])
    if path.suffix == ".si":
        data = lucene_segment_info(data, path.name)
    if len(data) >= 16 and data[-16:-12] == LUCENE_FOOTER:
        data = data[:-8] + b"\0" * 8  # the checksum (over the ids)
    return data


TIMES = ("created", "updated", "additions.*.added")
NORMALISED: list[Normalisation] = [
    Normalisation("A", r"[^/]+/manifest\.json", "dataset manifest: " + ", ".join(TIMES), json_fields(*TIMES)),
    Normalisation("B", r".+/lucene/manifest\.json", "Lucene index manifest: " + ", ".join((*TIMES, "seconds")),
                  json_fields(*TIMES, "seconds")),
    Normalisation("C", r".+/dense/manifest\.json", "dense index manifest: " + ", ".join(
        (*TIMES, "seconds", "faiss_seconds", "encoding.seconds", "encoding.passages_per_second",
         "additions.*.encode_seconds")),
        json_fields(*TIMES, "seconds", "faiss_seconds", "encoding.seconds", "encoding.passages_per_second",
                    "additions.*.encode_seconds")),
    Normalisation("D", r".+\.meta\.json", "run metadata: created, seconds, reader.seconds",
                  json_fields("created", "seconds", "reader.seconds")),
    Normalisation("E", r"[^/]+/training_args\.json", "training record: created", json_fields("created")),
    Normalisation("F", r"[^/]+/dev_curve\.json", "dev curve: *.seconds", json_fields("*.seconds")),
    Normalisation("G", r"[^/]+/README\.md", "model card: the time after 'created', the dev curve's seconds column",
                  model_card),
    Normalisation("H", r"(.+/)?lucene/(index|fields)/[^/]+",
                  "Lucene segment files: the random segment/commit ids, the CRC32 footer, and in .si the "
                  "diagnostics' flush timestamp and their order", lucene_file),
]


def version_rule(before: str, after: str) -> Normalisation:
    """When the two trees' corefsearch versions differ: the fields that record it."""
    fields = json_fields("corefsearch_version", "versions.corefsearch", "__version__.corefsearch")
    card = re.compile(rb"(versions: corefsearch )" + re.escape(before.encode()) + rb"|(versions: corefsearch )"
                      + re.escape(after.encode()))

    def apply(data: bytes, path: Path) -> bytes:
        if path.suffix == ".md":
            return card.sub(rb"\g<1>\g<2>" + PLACEHOLDER.encode(), data)
        return fields(data, path)

    return Normalisation("V", r"[^/]+/(manifest|training_args)\.json|.+/(manifest|config_sentence_transformers)"
                              r"\.json|.+\.meta\.json|[^/]+/README\.md",
                         f"corefsearch's version ({before} before, {after} after): corefsearch_version, "
                         f"versions.corefsearch, __version__.corefsearch, the model card's 'versions:'", apply)


@dataclass
class ArtefactResult:
    name: str
    files: int = 0
    differing: list[str] = field(default_factory=list)
    rules: set[str] = field(default_factory=set)  # the rules that made a file identical


def files_under(folder: Path) -> Iterator[str]:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            yield path.relative_to(folder).as_posix()


def compare_file(relative: str, before: Path, after: Path, rules: list[Normalisation]) -> tuple[bool, str, list[str]]:
    """Whether the two files are the same (after the matching rules, when their bytes differ), why
    not, and the rules used."""
    a, b = (before / relative).read_bytes(), (after / relative).read_bytes()
    if a == b:
        return True, "", []
    used = [rule for rule in rules if re.fullmatch(rule.pattern, relative)]
    try:
        for rule in used:
            a, b = rule.apply(a, before / relative), rule.apply(b, after / relative)
    except NormalisationError as err:
        return False, f"{err}", []
    return a == b, "", [rule.name for rule in used]


def compare_outputs(before: Path, after: Path, rules: list[Normalisation]) -> list[ArtefactResult]:
    """Every file of the two output folders, grouped by artefact (the top-level entry)."""
    results: dict[str, ArtefactResult] = {}
    for relative in sorted(set(files_under(before)) | set(files_under(after))):
        result = results.setdefault(relative.split("/")[0], ArtefactResult(relative.split("/")[0]))
        result.files += 1
        if not (before / relative).is_file() or not (after / relative).is_file():
            result.differing.append(f"{relative} (only {'after' if (after / relative).is_file() else 'before'})")
            continue
        same, why, used = compare_file(relative, before, after, rules)
        if same:
            result.rules.update(used)
        else:
            result.differing.append(f"{relative} ({why})" if why else relative)
    return list(results.values())


def print_table(results: list[ArtefactResult], rules: list[Normalisation]) -> None:
    rows = [("artefact", "files", "result", "normalised")]
    for result in results:
        verdict = f"DIFFERING ({len(result.differing)})" if result.differing else "identical"
        rows.append((result.name, str(result.files), verdict, ", ".join(sorted(result.rules)) or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for number, row in enumerate(rows):
        print(f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]}")
        if number == 0:
            print("  ".join("-" * width for width in widths))
    for result in results:
        for name in result.differing:
            print(f"  differs: {name}")
    used = sorted({name for result in results for name in result.rules})
    if used:
        print("\nnormalised (these fields replaced by a placeholder before comparing; every other byte as is):")
        for rule in rules:
            if rule.name in used:
                print(f"  {rule.name}  {rule.fields}")
    print("\nno tolerant comparison: model weights, vectors and FAISS indexes are compared byte for byte")


# --- main ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, metavar="REV", help="git revision of the code before the change")
    parser.add_argument("--after", metavar="REV_OR_FOLDER", help="git revision or source folder (with "
                        "src/corefsearch) after the change (default: this working tree)")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep the inputs, the outputs and the logs in this "
                        "folder (new or empty)")
    args = parser.parse_args(argv)
    try:
        return compare(args.before, args.after, args.keep)
    except ComparisonError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def compare(before_spec: str, after_spec: str | None, keep: Path | None) -> int:
    if keep is not None and keep.exists() and any(keep.iterdir()):
        raise ComparisonError(f"--keep {keep}: the folder exists and is not empty")
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if keep is None:
            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="same-outputs-")))
        else:
            base = keep.resolve()
            base.mkdir(parents=True, exist_ok=True)
        before_tree, before_name = source_tree(before_spec, base / "trees" / "before")
        after_tree, after_name = source_tree(after_spec, base / "trees" / "after")
        versions = [tree_version(tree) for tree in (before_tree, after_tree)]
        rules = NORMALISED + ([version_rule(*versions)] if versions[0] != versions[1] else [])
        print(f"before: {before_name}\nafter:  {after_name}", file=sys.stderr)
        inputs = write_inputs(base / "inputs")
        digest = tree_digest(base / "inputs")
        seconds = {}
        for label, tree in (("before", before_tree), ("after", after_tree)):
            work = base / "run"
            seconds[label] = run_pipeline(label, tree, inputs, work, base / "logs" / label)
            work.rename(base / label)
            if tree_digest(base / "inputs") != digest:
                raise ComparisonError(f"the {label} pipeline changed its inputs under {base / 'inputs'}")
        results = compare_outputs(base / "before", base / "after", rules)
    print(f"before: {before_name}\nafter:  {after_name}\n")
    print_table(results, rules)
    differing = sum(len(result.differing) for result in results)
    total = sum(result.files for result in results)
    print(f"\n{total - differing} of {total} files identical; pipeline {seconds['before']:.0f} s before, "
          f"{seconds['after']:.0f} s after, {time.perf_counter() - started:.0f} s in all"
          + (f"; outputs kept in {keep}" if keep is not None else ""))
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
