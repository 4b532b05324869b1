"""What the tests share, in one module: tiny random BERTs, the trainers' resume checks, the tiny
corpora and datasets (the retriever and reader tests' six news events, the small generic dataset of
the dense encoding tests, the mention clusterer's dataset), the readers' tiny inputs and training
arguments, and the `corefsearch serve` helpers. The shared fixtures built from these are in
conftest.py; no test module imports another."""

from __future__ import annotations

import collections
import contextlib
import json
import re
import socket
import string
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from corefsearch.base.artefacts import DATASET
from corefsearch.base.schema import Query
from corefsearch.datasets.dataset import Dataset
from corefsearch.io.trec import read_qrels

if TYPE_CHECKING:
    import numpy as np

    from corefsearch.dense.train import RetrieverTrainingArguments
    from corefsearch.reader.model import CrossEncoderReader
    from corefsearch.reader.train import ReaderTrainingArguments


# --- a small realistic corpus in the generic format (the news_corpus fixture of conftest.py) -----------

NEWS_DOCUMENTS: list[dict[str, Any]] = [
    {"doc_id": "flood-1", "title": "River floods Dayton",
     "text": "Torrential rain swept across Ohio on Tuesday. The Great Miami River overflowed its levees in "
             "Dayton, flooding the downtown area. Mayor Nan Whaley said hundreds of residents were "
             "evacuated. The National Guard was deployed on Wednesday."},
    {"doc_id": "flood-2", "title": "Dayton cleans up",
     "text": "Recovery began on Friday in Dayton. The flood, the worst the city has seen in a century, left "
             "thousands without power. Evacuated residents returned to their homes."},
    {"doc_id": "quake-1", "title": "Quake hits California",
     "text": "A magnitude 6.4 earthquake struck northern California early Sunday. No deaths were reported "
             "after the quake, according to the county sheriff."},
    {"doc_id": "quake-2",
     "text": "Aftershocks rattled Eureka on Monday. Sunday's earthquake damaged a bridge on Highway 101."},
]

# (mention_id, doc_id, phrase, cluster_id, type); each phrase occurs once in its document.
# Sentences (units) of each document: flood-1 has 4, flood-2 has 3, quake-1 and quake-2 have 2.
NEWS_MENTIONS: list[tuple[str, str, str, str, str]] = [
    ("overflowed", "flood-1", "overflowed", "dayton-flood", "event"),          # flood-1 sentence 1
    ("flooding", "flood-1", "flooding", "dayton-flood", "event"),              # flood-1 sentence 1
    ("evacuated", "flood-1", "evacuated", "evacuation", "event"),              # flood-1 sentence 2
    ("deployed", "flood-1", "deployed", "guard-deployment", "event"),          # singleton, sentence 3
    ("flood", "flood-2", "flood,", "dayton-flood", "event"),                   # flood-2 sentence 1
    ("evacuated-2", "flood-2", "Evacuated", "evacuation", "event"),            # flood-2 sentence 2
    ("earthquake", "quake-1", "earthquake", "ca-quake", "event"),              # quake-1 sentence 0
    ("quake", "quake-1", "quake,", "ca-quake", "event"),                       # quake-1 sentence 1
    ("earthquake-2", "quake-2", "earthquake", "ca-quake", "event"),            # quake-2 sentence 1
    ("aftershocks", "quake-2", "Aftershocks", "aftershocks", "event"),         # quake-2 sentence 0
    ("rattled", "quake-2", "rattled", "aftershocks", "event"),                 # quake-2 sentence 0
]


@dataclass(frozen=True)
class NewsCorpus:
    """The generic-format news corpus written to ``folder`` (corpus.jsonl, mentions.jsonl)."""

    folder: Path
    documents: dict[str, dict[str, Any]]
    mentions: dict[str, dict[str, Any]]

    def mention_text(self, mention_id: str) -> str:
        mention = self.mentions[mention_id]
        return self.documents[mention["doc_id"]]["text"][mention["start"]:mention["end"]]


def write_jsonl(path: Path, records: list[Any]) -> Path:
    """Write records (dicts, or raw strings for broken lines) one a line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records),
                    encoding="utf-8")
    return path


def news_mention_records() -> list[dict[str, Any]]:
    texts = {doc["doc_id"]: doc["text"] for doc in NEWS_DOCUMENTS}
    records = []
    for mention_id, doc_id, phrase, cluster_id, kind in NEWS_MENTIONS:
        text = texts[doc_id]
        assert text.count(phrase) == 1, phrase
        start = text.index(phrase)
        end = start + len(phrase.rstrip(","))
        records.append({"mention_id": mention_id, "doc_id": doc_id, "start": start, "end": end,
                        "cluster_id": cluster_id, "type": kind})
    return records


# --- tiny random BERTs (2 layers, 32 wide, random weights seeded by ``seed``) ---------------------------

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def save_tiny_bert(folder: Path, tokens: list[str], seed: int = 0, max_positions: int = 256) -> Path:
    """A BERT whose vocabulary is ``SPECIAL`` + ``tokens`` (duplicates dropped), saved to ``folder``
    with its tokenizer, so that any model option loads it like a Hugging Face folder."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    vocab = list(dict.fromkeys(SPECIAL + tokens))
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)})
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=max_positions)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def make_tiny_bert(folder: Path, words: list[str], seed: int) -> Path:
    """A tiny BERT with a word + character WordPiece vocabulary: any text tokenises without [UNK]
    runs, so it fits datasets whose words are not all known in advance."""
    characters = list(string.ascii_lowercase + string.digits + string.punctuation)
    return save_tiny_bert(folder, characters + ["##" + c for c in characters] + words, seed=seed)


def frequent_words(dataset: Path, n: int = 1500) -> list[str]:
    """The ``n`` most frequent lower-cased words of a built dataset's passages."""
    counts: collections.Counter[str] = collections.Counter()
    for passage in Dataset(dataset).passages():
        counts.update(re.findall(r"[a-z0-9]+", f"{passage.title} {passage.text}".lower()))
    return [word for word, _ in counts.most_common(n)]


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Torch on one thread for the block: tiny models run fastest so (and several threads crawl
    when the CPU is shared)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# --- the trainers' resume tests: Ctrl-C in a training step, "the same model folder" ----------------------

class Interrupt:
    """Wraps a function called inside a training step; on its ``at``-th call (after the real call,
    so the step has drawn its dropout masks) raises KeyboardInterrupt, as Ctrl-C would."""

    def __init__(self, func: Any, at: int) -> None:
        self.func, self.at, self.calls = func, at, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        value = self.func(*args, **kwargs)
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return value


def dev_curve(folder: Path) -> list[dict[str, Any]]:
    """A model folder's dev curve without the timings."""
    entries = json.loads((folder / "dev_curve.json").read_text(encoding="utf-8"))
    return [{k: v for k, v in entry.items() if k != "seconds"} for entry in entries]


def assert_same_model(folder: Path, reference: Path) -> None:
    """The same weights, byte for byte (every ``*.safetensors``), and the same dev curve."""
    weights = sorted(p.relative_to(folder) for p in folder.rglob("*.safetensors"))
    assert weights and weights == sorted(p.relative_to(reference) for p in reference.rglob("*.safetensors"))
    for name in weights:
        assert (folder / name).read_bytes() == (reference / name).read_bytes(), name
    assert dev_curve(folder) == dev_curve(reference)


# --- a tiny news corpus: six events, two documents each, one mention a sentence ({marked}) ----------

TINY_EVENTS: dict[str, list[tuple[str, list[str]]]] = {
    "dayton-flood": [
        ("Dayton under water", ["Heavy rain {flooded} downtown Dayton on Tuesday.",
                                "The {flood} forced hundreds of families from their homes."]),
        ("Dayton recovers", ["Dayton residents returned home after the {flooding}.",
                             "Officials said the {flood} caused damage worth millions."]),
    ],
    "eureka-quake": [
        ("Quake in California", ["A strong {earthquake} shook northern California on Sunday.",
                                 "The {quake} damaged a bridge near Eureka."]),
        ("Eureka schools reopen", ["Eureka schools reopened days after the {earthquake}.",
                                   "Engineers inspected the bridge the {tremor} had cracked."]),
    ],
    "springfield-election": [
        ("Lopez wins", ["Voters {elected} Maria Lopez mayor of Springfield on Monday.",
                        "Her {victory} ended twelve years of rule by one party."]),
        ("Record turnout", ["Lopez thanked supporters a day after her {election}.",
                            "Turnout in the {vote} reached a record high."]),
    ],
    "leeds-fire": [
        ("Mill burns", ["A {fire} destroyed the old textile mill in Leeds.",
                        "Firefighters fought the {blaze} through the night."]),
        ("Arson suspected", ["Police suspect arson in the mill {fire}.",
                             "The {blaze} sent smoke across the city centre."]),
    ],
    "acme-merger": [
        ("Acme buys Baker", ["Acme Foods agreed to {acquire} Baker Brothers for two billion dollars.",
                             "The {deal} still needs approval from regulators."]),
        ("Baker shares jump", ["Shares of Baker Brothers jumped after the {takeover} was announced.",
                               "Analysts praised the {acquisition} on Wednesday."]),
    ],
    "rail-strike": [
        ("Rail strike", ["Rail workers began a {strike} across the country on Friday.",
                         "The {walkout} stranded thousands of commuters."]),
        ("Trains run again", ["Union leaders ended the rail {strike} after three days.",
                              "Trains ran normally again after the {walkout}."]),
    ],
}


def write_corpus(folder: Path) -> None:
    documents, mentions = [], []
    for cluster, docs in TINY_EVENTS.items():
        for number, (title, sentences) in enumerate(docs):
            doc_id = f"{cluster}-{number}"
            text = ""
            for sentence in sentences:
                start = len(text) + sentence.index("{")
                phrase = sentence[sentence.index("{") + 1:sentence.index("}")]
                mentions.append({"mention_id": f"{doc_id}-{len(mentions)}", "doc_id": doc_id, "start": start,
                                 "end": start + len(phrase), "cluster_id": cluster, "type": "event"})
                text += sentence.replace("{", "").replace("}", "") + " "
            documents.append({"doc_id": doc_id, "title": title, "text": text.strip()})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in documents), encoding="utf-8")
    (folder / "mentions.jsonl").write_text("".join(json.dumps(m) + "\n" for m in mentions), encoding="utf-8")


def corpus_words() -> list[str]:
    words: dict[str, None] = {}
    for docs in TINY_EVENTS.values():
        for title, sentences in docs:
            for piece in [title, *sentences]:
                for token in re.findall(r"\w+|[^\w\s]", piece.replace("{", "").replace("}", "").lower()):
                    words[token] = None
    return list(words)


def build_tiny_dataset(tmp_path_factory: pytest.TempPathFactory, ratios: tuple[float, float, float]) -> Path:
    from corefsearch.datasets.build import BuildOptions, build_dataset
    from corefsearch.datasets.generic import read_generic

    root = tmp_path_factory.mktemp("tiny-dataset")
    write_corpus(root / "corpus")
    out = root / "dataset"
    build_dataset(read_generic(root / "corpus"), out, BuildOptions(split_ratios=ratios, seed=13))
    return out


def retriever_args(base: Path, **changes: Any) -> RetrieverTrainingArguments:
    # Mean pooling: the [CLS] vector of a random tiny BERT hardly depends on its input, and
    # training it in a few steps tends to collapse all vectors together.
    from corefsearch.dense.train import RetrieverTrainingArguments

    args = RetrieverTrainingArguments(base_model=str(base), epochs=2, batch_size=8, lr=1e-3, warmup=0.0,
                                      pooling="mean", max_query_len=24, max_passage_len=32, hard_negatives=0,
                                      seed=7, device="cpu")
    return replace(args, **changes)


# --- the readers' tiny inputs and models ---------------------------------------------------------------

def flat(output: str) -> str:
    """CLI output with rich's line wrapping undone."""
    return " ".join(output.split())


def reader_args(base: Path, **changes: Any) -> ReaderTrainingArguments:
    from corefsearch.reader.train import ReaderTrainingArguments

    args = ReaderTrainingArguments(base_model=str(base), epochs=1, batch_size=2, lr=1e-3, warmup=0.0, negatives=5,
                                   max_length=48, max_query_len=16, doc_stride=8, hidden=16, seed=5,
                                   device="cpu", dev_rerank_k=10)
    return replace(args, **changes)


def tiny_reader(base: Path, head: str, markers: bool = True) -> CrossEncoderReader:
    import torch

    from corefsearch.reader.model import CrossEncoderReader, ReaderConfig

    torch.manual_seed(1)
    config = ReaderConfig(head=head, markers=markers, max_length=48, max_query_len=16, doc_stride=8, hidden=16)
    return CrossEncoderReader.from_base(str(base), config)


def a_query() -> Query:
    text = "Firefighters fought the blaze through the night."
    return Query("q1", "leeds-fire-0-1", text, text.index("blaze"), text.index("blaze") + 5, "blaze", "leeds-fire")


PASSAGES = [("p1", "A fire destroyed the old textile mill in Leeds."),
            ("p2", "Rail workers began a strike across the country on Friday."),
            ("p3", "Police suspect arson in the mill fire and the blaze sent smoke across the city centre "
                   "while firefighters fought through the night. Firefighters fought the blaze in Leeds through the "
                   "night and the fire destroyed the old textile mill.")]


# --- a small generic dataset for the encoding mechanics ----------------------------------------------

SMALL_EVENTS = ["earthquake", "flood", "election", "fire", "strike", "trial", "storm", "merger"]
SMALL_PLACES = ["Dayton", "Jakarta", "Eureka", "Lima", "Oslo", "Perth", "Quito", "Cairo"]


def write_small_dataset(root: Path) -> Path:
    """About 96 sentence passages (24 documents of 4 sentences), 8 event clusters, built under ``root``."""
    from corefsearch.datasets.build import BuildOptions, build_dataset
    from corefsearch.datasets.generic import read_generic

    documents, mentions = [], []
    for d in range(24):
        event, place = SMALL_EVENTS[d % 8], SMALL_PLACES[(d * 3) % 8]
        sentences = [f"The {event} hit {place} on day {d}.", f"Officials in {place} counted {d + 3} reports.",
                     f"Witness number {d} described the {event} again.", f"Story {d} ends here with {place}."]
        text = " ".join(sentences)
        documents.append({"doc_id": f"doc{d}", "title": f"News {d}", "text": text})
        for occurrence in (m.start() for m in re.finditer(event, text)):
            mentions.append({"mention_id": f"m{d}-{occurrence}", "doc_id": f"doc{d}", "start": occurrence,
                             "end": occurrence + len(event), "cluster_id": event})
    corpus = root / "corpus"
    corpus.mkdir()
    (corpus / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in documents))
    (corpus / "mentions.jsonl").write_text("".join(json.dumps(m) + "\n" for m in mentions))
    out = root / "dataset"
    build_dataset(read_generic(corpus), out, BuildOptions(split_ratios=(0.0, 0.0, 1.0)))
    return out


def index_contents(index: Path) -> tuple[list[str], np.ndarray]:
    """Row ids and the stored vectors of a flat index."""
    from corefsearch.dense import faiss_index

    searcher_index = faiss_index.read_index(index / "dense" / "faiss.index")
    ids = (index / "dense" / "ids.txt").read_text().splitlines()
    return ids, searcher_index.reconstruct_n(0, searcher_index.ntotal)


# --- the mention clusterer's tiny dataset ---------------------------------------------------------------

# doc -> (topic, [sentence 0, sentence 1]); mentions: (id, doc, sentence N, word, cluster)
CLUSTER_DOCS = {
    "a1": ("fire", ["A fire broke out at the mill in Leeds.", "The mill was destroyed by morning."]),
    "a2": ("fire", ["Crews fought the blaze for hours.", "The building burned down before dawn."]),
    "b1": ("court", ["The judge sentenced the man on Friday.", "He had robbed a bank in May."]),
    "b2": ("court", ["A court jailed the robber for ten years.", "The robbery shocked the town."]),
    "c1": ("quake", ["An earthquake struck the coast.", "Six people were killed in the village."]),
    "c2": ("quake", ["The quake hit at night and rescuers came.", "Two men died under the rubble."]),
    "d1": ("markets", ["Shares fell sharply on Monday.", "Oil prices rose after the news."]),
    "d2": ("markets", ["Stocks dropped again on Tuesday.", "Traders were worried."]),
}
CLUSTER_MENTIONS = [("a1-fire", "a1", 0, "fire", "fire"), ("a2-blaze", "a2", 0, "blaze", "fire"),
            ("a1-destroyed", "a1", 1, "destroyed", "burn"), ("a2-burned", "a2", 1, "burned", "burn"),
            ("b1-sentenced", "b1", 0, "sentenced", "jail"), ("b2-jailed", "b2", 0, "jailed", "jail"),
            ("b1-robbed", "b1", 1, "robbed", "rob"), ("b2-robbery", "b2", 1, "robbery", "rob"),
            ("c1-earthquake", "c1", 0, "earthquake", "quake"), ("c2-quake", "c2", 0, "quake", "quake"),
            ("c1-killed", "c1", 1, "killed", "die"), ("c2-died", "c2", 1, "died", "die"),
            ("c2-came", "c2", 0, "came", "rescue"),
            ("d1-fell", "d1", 0, "fell", "fall"), ("d2-dropped", "d2", 0, "dropped", "fall"),
            ("d1-rose", "d1", 1, "rose", "rise")]
CLUSTER_SPLITS = {"fire": "train", "burn": "train", "jail": "train", "rob": "train", "quake": "dev", "die": "dev",
          "rescue": "dev", "fall": "test", "rise": "test"}


def write_cluster_dataset(root: Path, splits: dict[str, str] = CLUSTER_SPLITS) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "manifest.json").write_text(json.dumps({"kind": DATASET.kind}), encoding="utf-8")
    lines = []
    for doc_id, (topic, sentences) in CLUSTER_DOCS.items():
        for number, text in enumerate(sentences):
            mentions = [{"mention_id": m, "start": text.index(w), "end": text.index(w) + len(w), "cluster_id": c,
                         "type": "event"} for m, d, n, w, c in CLUSTER_MENTIONS if d == doc_id and n == number]
            lines.append({"id": f"{doc_id}-{number}", "doc_id": doc_id, "title": "", "text": text,
                          "mentions": mentions, "topic": topic})
    (root / "passages.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    clusters: dict[str, list[str]] = {}
    for mention_id, _, _, _, cluster in CLUSTER_MENTIONS:
        clusters.setdefault(cluster, []).append(mention_id)
    (root / "clusters.jsonl").write_text("".join(
        json.dumps({"cluster_id": c, "split": splits[c], "type": "event", "mention_ids": ids}) + "\n"
        for c, ids in clusters.items()), encoding="utf-8")
    return root


def cluster_words() -> list[str]:
    """The word-level vocabulary of the mention clusterer's tiny dataset."""
    return list(dict.fromkeys(t for _, sentences in CLUSTER_DOCS.values() for s in sentences
                              for t in re.findall(r"\w+|[^\w\s]", s.lower())))


def save_mention_encoder(base: Path, folder: Path) -> Path:
    """An untrained mention encoder on ``base`` (seeded), saved to ``folder`` with τ 0.5."""
    import torch

    from corefsearch.cluster.model import ClustererConfig, MentionEncoder

    torch.manual_seed(1)
    encoder = MentionEncoder.from_base(str(base), ClustererConfig(mlp_hidden=16, mlp_out=8, threshold=0.5))
    encoder.save(folder)
    return folder


def read_clusters(path: Path) -> dict[str, str]:
    """A clusters file (one {mention_id, cluster_id} a line) as mention -> cluster, checked."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert all(set(r) == {"mention_id", "cluster_id"} for r in records)
    assignment = {r["mention_id"]: r["cluster_id"] for r in records}
    assert len(assignment) == len(records)
    return assignment


def partition(assignment: dict[str, Any]) -> set[frozenset[str]]:
    """The clusters of an assignment as sets of mention ids, whatever the cluster ids."""
    groups: dict[Any, set[str]] = {}
    for mention_id, cluster_id in assignment.items():
        groups.setdefault(cluster_id, set()).add(mention_id)
    return {frozenset(g) for g in groups.values()}


# --- `corefsearch serve`: a saved reader, a real server, queries of the ECB+ subset ---------------------

REPRINT_DOC = "reprint-1"
REPRINT_PASSAGE = "reprint-1-0"  # the reprint's one passage (a distractor is one unit)


def tiny_bert(dataset: Path, folder: Path) -> Path:
    """The 2-layer, 32-wide random BERT of the dense tests, with the dataset's frequent words."""
    return make_tiny_bert(folder, frequent_words(dataset), seed=0)


def saved_reader(base: Path, folder: Path) -> Path:
    """A randomly initialised integrated reader (markers) on ``base``, saved to ``folder`` the way
    ``corefsearch train reader`` saves one (so ``--reader folder`` loads it)."""
    import torch

    from corefsearch.reader.model import CrossEncoderReader, ReaderConfig

    torch.manual_seed(1)
    config = ReaderConfig(head="integrated", markers=True, max_length=64, max_query_len=24, doc_stride=16, hidden=16)
    CrossEncoderReader.from_base(str(base), config).save(folder)
    return folder


def subset_query(dataset: Path, min_start: int = 10) -> Query:
    """A test query of the subset whose mention is one word that occurs once in its passage, after
    ``min_start`` characters (a selection inside the text, not at its edge)."""
    for query in Dataset(dataset).queries("test"):
        if (query.mention.isalpha() and query.text.count(query.mention) == 1 and query.start >= min_start
                and len(query.text) > 80):
            return query
    raise AssertionError("the ECB+ subset has no such test query")


def query_with_a_relevant_hit(engine: Any, dataset: Path, k: int) -> Query:
    """A test query with a relevant passage in the engine's top ``k`` (no re-ranking)."""
    for candidate in Dataset(dataset).queries("test")[:40]:
        if any(hit.relevant for hit in engine.query(qid=candidate.id, k=k, rerank_k=0).hits):
            return candidate
    raise AssertionError(f"no test query of the subset has a relevant passage in the top {k}")


def subset_with_a_reprint(ecbplus_subset: Path, subset_dataset: Path, folder: Path) -> tuple[Path, Path, Query]:
    """The subset's dataset with one distractor: a reprint of the passage of a test query that has
    at least three relevant passages, never annotated; and its Lucene index. Returns
    ``(dataset, index, query)``: the reprint is the query's top BM25 hit, its relevant passages
    and the other passages of the annotated ECB+ documents come after it."""
    from corefsearch.datasets.build import BuildOptions, build_dataset
    from corefsearch.datasets.ecbplus import read_ecbplus
    from corefsearch.sparse.index import build_lucene_index

    qrels = read_qrels(Dataset(subset_dataset).qrels_path("test"))
    query = next(q for q in Dataset(subset_dataset).queries("test") if len(qrels.get(q.id, {})) >= 3)
    distractors = folder / "distractors.jsonl"
    folder.mkdir(parents=True, exist_ok=True)
    distractors.write_text(json.dumps({"doc_id": REPRINT_DOC, "title": "Reprinted", "text": query.text}) + "\n",
                           encoding="utf-8")
    dataset = folder / "dataset"
    build_dataset(read_ecbplus(ecbplus_subset), dataset, BuildOptions(splits=("test",)), distractors=[distractors],
                  source_name=str(ecbplus_subset))
    index = folder / "index"
    build_lucene_index(dataset, index)
    return dataset, index, query


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ServerThread:
    """``app`` served by uvicorn on 127.0.0.1 at a free port, in a thread, until :meth:`stop`."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="uvicorn-test", daemon=True)

    def start(self, timeout: float = 60) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on port {self.port}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def write_texts(folder: Path, documents: list[dict[str, Any]]) -> Path:
    """``documents`` as plain .txt files (the title on the first line), as `build-dataset --format text` reads them."""
    folder.mkdir(parents=True)
    for document in documents:
        (folder / f"{document['doc_id']}.txt").write_text(f"{document.get('title', '')}\n{document['text']}\n",
                                                          encoding="utf-8")
    return folder


def plain_news_collection(root: Path) -> tuple[Path, Path]:
    """The news corpus as plain .txt files (no annotation at all), built into a dataset and indexed with Lucene:
    ``(dataset, index)``."""
    from typer.testing import CliRunner

    from corefsearch.cli import app

    texts = write_texts(root / "texts", NEWS_DOCUMENTS)
    runner = CliRunner()
    for args in (["build-dataset", texts, "--format", "text", "--out", root / "dataset"],
                 ["index", root / "dataset", "--out", root / "index", "--threads", 1]):
        result = runner.invoke(app, [str(arg) for arg in args])
        assert result.exit_code == 0, result.output
    return root / "dataset", root / "index"


# --- shipped models: a model folder with its card, in a folder of shipped models of the test's own ------------


def ship(folder: Path, kind: str, mention_type: str | None = "event", **card: Any) -> Path:
    """Make the model folder ``folder`` a shipped model (its name: the folder's): its ``corefsearch_card.json``
    (``card`` changes its fields) and a ``README.md``."""
    record = {"name": folder.name, "kind": kind, "description": f"A tiny random {kind} of the tests.",
              "mention_type": mention_type, "format": "safetensors", "recipe": f"corefsearch train {kind} DATASET",
              "data": [{"path": "data/ecbplus/ECBplus.tar.gz", "sha256": "sha256:0"}],
              "scores": {"dev": {"CoNLL F1": 72.65}, "test": {"CoNLL F1": 70.5, "MUC F1": 80}},
              "limits": "Random weights: for the tests only.", "base_model": "tiny-bert", "created": "2025-01-31",
              **card}
    (folder / "corefsearch_card.json").write_text(json.dumps(record, indent=2), encoding="utf-8")
    (folder / "README.md").write_text(f"# {folder.name}\n\n{record['description']}\n", encoding="utf-8")
    return folder


def save_detector(base: Path, folder: Path) -> Path:
    """An untrained mention detector (events and entities) on ``base``, saved to ``folder``."""
    import torch

    from corefsearch.detect.model import DetectorConfig, MentionDetector

    torch.manual_seed(1)
    MentionDetector.from_base(str(base), DetectorConfig(max_length=64, stride=8)).save(folder)
    return folder


def bench_module(name: str) -> Any:
    """The module ``bench/NAME.py`` (a script of the benchmarks, importable with its sibling modules)."""
    import importlib
    import sys

    folder = str(Path(__file__).resolve().parents[1] / "bench")
    sys.path.insert(0, folder)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(folder)


def ship_encoder_and_detector(base: Path, root: Path) -> Path:
    """``root`` made a folder of shipped models: an event mention encoder and a detector of every type."""
    ship(save_mention_encoder(base, root / "event-encoder"), "clusterer", "event")
    ship(save_detector(base, root / "detector-all"), "detector", "all",
         scores={"dev": {"F1": 0.5}, "test": {"F1": 0.25}})
    return root



# The ways a dataset's predicted mentions (``predicted_mentions.jsonl`` and its manifest ``predicted_mentions.json``)
# can be broken, and the one line every command that reads them (or `detect`, about to write them) says of each.
BROKEN_PREDICTED = ("manifest-only", "mentions-only", "changed")


def break_predicted(dataset: Path, state: str) -> str:
    """Leave ``dataset``'s predicted mentions (both files there) in the broken ``state`` (one of
    :data:`BROKEN_PREDICTED`); the message every command gives (without ``error: ``)."""
    from corefsearch.io.write import sha256_file

    root = Path(dataset)
    mentions, manifest = root / "predicted_mentions.jsonl", root / "predicted_mentions.json"
    fix = f"run `corefsearch detect {root} --model MODEL|heuristic --overwrite` to detect them again"
    if state == "manifest-only":
        mentions.unlink()
        return f"{manifest} records predicted mentions but {mentions} is missing (deleted or moved); {fix}"
    if state == "mentions-only":
        manifest.unlink()
        return (f"{mentions} has no manifest beside it (predicted_mentions.json is missing: copied without it, or "
                f"`detect` stopped before writing it); {fix}")
    assert state == "changed", state
    record = json.loads(manifest.read_text(encoding="utf-8"))  # a hand-written manifest may record no checksum
    record["file_sha256"] = "sha256:" + sha256_file(mentions)
    manifest.write_text(json.dumps(record), encoding="utf-8")
    lines = mentions.read_text(encoding="utf-8").splitlines(keepends=True)
    mentions.write_text("".join(lines[:-1]), encoding="utf-8")  # one mention fewer: still a valid file
    return (f"{mentions} no longer matches its manifest {manifest} (its checksum is not the one recorded: the file "
            f"changed after it was written); {fix}")
