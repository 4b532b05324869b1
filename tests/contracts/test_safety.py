"""Never lose or corrupt the user's data: outputs that would overwrite an input
are refused, outputs are checked before any work, two processes never write one output, what a
killed run left is cleaned up, and a missing model folder says so. (That an interrupted training
resumes to exactly the uninterrupted result is tested once for the loop, in test_training_loop.py,
and once per trainer, in test_dense_train.py, test_reader.py and test_cluster_encoder.py.)

Tiny random BERTs and the tiny news corpus of helpers.py; no Java unless marked."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corefsearch.base.errors import InputError
from corefsearch.cli import app
from corefsearch.io.outputs import (
    check_output_dir,
    check_output_file,
    clean_stale_temporaries,
    lock_path_for,
    output_lock,
)
from corefsearch.io.trec import RunRow, write_run
from corefsearch.training.checkpoint import work_dir_for

# A wide console, so that rich does not wrap long temporary paths in the output.
runner = CliRunner(env={"COLUMNS": "400"})
# The tiny corpus and random BERT of the retriever tests (conftest.py), on one torch thread.
pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[2]


def digest(path: Path) -> str:
    """A checksum of a file, or of every file under a folder (names and bytes)."""
    if not path.is_dir():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    sha = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        sha.update(str(file.relative_to(path)).encode())
        sha.update(file.read_bytes())
    return sha.hexdigest()


def fails(*args: object) -> str:
    """Run the CLI, expect one clean error line (exit 1, no traceback); return it, whitespace-normalised."""
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, result.output
    return " ".join(errors[0].split())


def small_run(dataset: Path, path: Path) -> Path:
    """A run of the dataset's dev queries over two passages each."""
    from corefsearch.datasets.dataset import Dataset

    data = Dataset(dataset)
    passages = [p.id for p in data.passages()][:2]
    write_run(path, [RunRow(q.id, pid, rank, 10.0 - rank, "t") for q in data.queries("dev")
                     for rank, pid in enumerate(passages, 1)])
    return path


# --- 1. an output never overwrites an input --------------------------------------------------------


def test_build_dataset_refuses_to_write_over_its_corpus(news_corpus: Any) -> None:
    corpus = news_corpus.folder
    before = digest(corpus)
    for out, how in ((corpus, "is the input"), (corpus.parent, "contains the input"),
                     (corpus / "dataset", "lies inside the input")):
        line = fails("build-dataset", corpus, "--format", "generic", "--out", out, "--overwrite")
        assert f"--out {out} {how} INPUT {corpus}" in line and "choose another --out" in line
    assert digest(corpus) == before
    assert sorted(p.name for p in corpus.iterdir()) == ["corpus.jsonl", "mentions.jsonl"]
    assert not (corpus / "dataset").exists()


def test_build_dataset_refuses_a_distractors_file_inside_out(news_corpus: Any, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    out.mkdir()
    distractors = out / "more.jsonl"
    distractors.write_text('{"doc_id": "d1", "text": "Nothing happened."}\n', encoding="utf-8")
    line = fails("build-dataset", news_corpus.folder, "--format", "generic", "--out", out, "--overwrite",
                 "--distractors", distractors)
    assert "contains the input --distractors" in line
    assert distractors.exists()


def test_search_evaluate_and_train_refuse_outputs_that_are_inputs(tiny_dataset: Path, tiny_run: Path,
                                                                  tmp_path: Path) -> None:
    queries = tiny_dataset / "queries" / "dev.jsonl"
    before_queries, before_run, before_dataset = digest(queries), digest(tiny_run), digest(tiny_dataset)
    index = tmp_path / "index"  # never reached: the outputs are checked first
    line = fails("search", "--index", index, "--queries", queries, "--out", queries)
    assert f"--out {queries} is the input --queries {queries}" in line
    # The same file through a symbolic link and a relative path.
    link = tmp_path / "link.jsonl"
    link.symlink_to(queries)
    assert "is the input --queries" in fails("search", "--index", index, "--queries", queries, "--out", link)
    relative = os.path.relpath(queries)
    assert "is the input --queries" in fails("search", "--index", index, "--queries", relative, "--out", queries)

    run = tmp_path / "run.trec"
    run.write_bytes(tiny_run.read_bytes())
    line = fails("evaluate", run, "--qrels", tiny_dataset / "qrels" / "dev.txt", "--per-query", run)
    assert f"--per-query {run} is the input RUN {run}" in line
    line = fails("evaluate", run, "--qrels", tiny_dataset / "qrels" / "dev.txt",
                 "--per-query", tiny_dataset / "qrels" / "dev.txt")
    assert "is the input --qrels" in line
    assert digest(run) == before_run

    line = fails("index", tiny_dataset, "--out", tiny_dataset, "--overwrite")
    assert f"--out {tiny_dataset / 'lucene'} lies inside the input DATASET {tiny_dataset}" in line
    line = fails("index", tiny_dataset, "--out", tiny_dataset, "--dense", "--encoder", "default", "--overwrite")
    assert "lies inside the input DATASET" in line
    assert "is the input DATASET" in fails("train", "retriever", tiny_dataset, "--out", tiny_dataset, "--overwrite")
    assert "is the input --run" in fails("train", "reader", tiny_dataset, "--run", tiny_run, "--out", tiny_run,
                                         "--overwrite")
    assert digest(queries) == before_queries and digest(tiny_run) == before_run
    assert digest(tiny_dataset) == before_dataset


def test_spans_out_must_differ_from_out(tiny_dataset: Path, tmp_path: Path) -> None:
    reader = tmp_path / "reader"
    reader.mkdir()
    run = tmp_path / "run.trec"
    line = fails("search", "--index", tmp_path / "index", "--queries", tiny_dataset / "queries" / "dev.jsonl",
                 "--out", run, "--reader", reader, "--spans-out", run)
    assert f"--spans-out {run} is the input --out {run}" in line


# --- 2. outputs checked before the work -----------------------------------------------------------


def test_outputs_are_checked_before_any_work(tiny_dataset: Path, tmp_path: Path) -> None:
    queries = tiny_dataset / "queries" / "dev.jsonl"
    folder = tmp_path / "a-folder"
    folder.mkdir()
    line = fails("search", "--index", tmp_path / "no-index", "--queries", queries, "--out", folder)
    assert f"--out {folder} is a folder; give the path of a file to write" in line
    regular = tmp_path / "notes.txt"
    regular.write_text("mine\n", encoding="utf-8")
    line = fails("search", "--index", tmp_path / "no-index", "--queries", queries, "--out", regular / "x" / "run.trec")
    assert f"{regular} is a file, not a folder" in line
    line = fails("train", "retriever", tiny_dataset, "--out", regular)
    assert f"--out {regular} is a file; give the path of a folder to write" in line
    line = fails("index", tiny_dataset, "--out", regular)
    assert f"{regular} is a file, not a folder" in line
    assert regular.read_text(encoding="utf-8") == "mine\n"
    run = small_run(tiny_dataset, tmp_path / "run.trec")
    line = fails("evaluate", run, "--qrels", tiny_dataset / "qrels" / "dev.txt", "--per-query", folder)
    assert "--per-query" in line and "is a folder" in line


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_a_read_only_parent_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    if os.geteuid() == 0:
        # root may write into a read-only folder; ask the permission check as an ordinary user would get it.
        import corefsearch.io.outputs

        real_access = os.access
        monkeypatch.setattr(corefsearch.io.outputs.os, "access",
                            lambda path, mode, **kwargs: False if Path(path) == locked
                            else real_access(path, mode, **kwargs))
    try:
        with pytest.raises(InputError, match="permission denied"):
            check_output_file(locked / "run.trec", "--out")
        with pytest.raises(InputError, match=f"cannot create {locked / 'sub'} in {locked}"):
            check_output_dir(locked / "sub" / "index", "--out")
    finally:
        locked.chmod(0o755)


def test_check_functions_accept_fine_outputs(tmp_path: Path) -> None:
    check_output_file(tmp_path / "new" / "deeper" / "run.trec", "--out", {"--queries": tmp_path / "q.jsonl"})
    check_output_dir(tmp_path / "index", "--out", [("DATASET", tmp_path / "dataset"), ("--encoder", None)])
    # Only whole path components count: "data-2" is not inside "data".
    check_output_dir(tmp_path / "data-2", "--out", {"INPUT": tmp_path / "data"})
    assert not (tmp_path / "new").exists()  # checking creates nothing


# --- 3. one writer per output -----------------------------------------------------------------------


def test_a_locked_output_fails_the_second_writer(tiny_dataset: Path, tiny_base: Path, tmp_path: Path) -> None:
    index = tmp_path / "index"
    with output_lock(index / "lucene"):
        line = fails("index", tiny_dataset, "--out", index, "--threads", "1")
    assert line == (f"error: {index / 'lucene'} is being written by another corefsearch process; wait for it "
                    "or choose another --out")
    assert not (index / "lucene").exists()

    with output_lock(index / "dense"):
        line = fails("index", tiny_dataset, "--out", index, "--dense", "--encoder", tiny_base, "--device", "cpu")
    assert "being written by another corefsearch process" in line and not (index / "dense").exists()

    out = tmp_path / "run.trec"
    out.write_text("the previous run\n", encoding="utf-8")
    with output_lock(out):
        line = fails("search", "--index", index, "--queries", tiny_dataset / "queries" / "dev.jsonl", "--out", out)
    assert f"{out} is being written by another corefsearch process" in line
    assert out.read_text(encoding="utf-8") == "the previous run\n"

    model = tmp_path / "model"
    with output_lock(model):
        line = fails("train", "retriever", tiny_dataset, "--out", model, "--base-model", tiny_base)
    assert "being written by another corefsearch process" in line and not work_dir_for(model).exists()
    # Released: no lock file is left beside the outputs.
    assert not [p for p in tmp_path.rglob(".*.lock")]


def test_the_lock_file_is_removed_and_the_lock_can_be_taken_again(tmp_path: Path) -> None:
    out = tmp_path / "index" / "dense"
    with output_lock(out):
        assert lock_path_for(out).exists()
        with pytest.raises(InputError, match="being written by another corefsearch process"), output_lock(out):
            pass
    assert not lock_path_for(out).exists()
    with output_lock(out):
        pass
    assert not (tmp_path / "index").exists()  # the folder made for the lock file goes with it


HOLD_LOCK = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from corefsearch.io.outputs import output_lock
    with output_lock(Path(sys.argv[1])):
        print("locked", flush=True)
        sys.stdin.readline()
""")


def test_a_lock_held_by_another_process(tiny_dataset: Path, tiny_base: Path, tmp_path: Path) -> None:
    index = tmp_path / "index"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(index / "dense")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        line = fails("index", tiny_dataset, "--out", index, "--dense", "--encoder", tiny_base, "--device", "cpu")
        assert "being written by another corefsearch process" in line
    finally:
        holder.communicate("\n", timeout=60)
    assert holder.returncode == 0
    result = runner.invoke(app, ["index", str(tiny_dataset), "--out", str(index), "--dense", "--encoder",
                                 str(tiny_base), "--device", "cpu"])
    assert result.exit_code == 0, result.output


def test_two_dense_indexings_into_one_index(tiny_dataset: Path, tiny_base: Path, tmp_path: Path) -> None:
    """Two real processes: one writes the index, the other fails with one line (being written, or
    already exists when the first was done before it started); never a traceback or a mixed index."""
    index = tmp_path / "index"
    command = [sys.executable, "-m", "corefsearch.cli", "index", str(tiny_dataset), "--out", str(index), "--dense",
               "--encoder", str(tiny_base), "--device", "cpu", "--chunk-size", "4", "--batch-size", "2"]
    env = {**os.environ, "COLUMNS": "400", "OMP_NUM_THREADS": "1"}
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for _ in range(2)]
    results = [(p.wait(timeout=300), *p.communicate()) for p in processes]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 1], results
    loser = next(err for code, _, err in results if code == 1)
    assert "Traceback" not in loser
    assert ("being written by another corefsearch process" in loser) or ("already exists" in loser), loser
    from corefsearch.dense.search import DenseSearcher

    searcher = DenseSearcher(index, device="cpu")
    assert searcher.manifest["passages"] == sum(1 for _ in (tiny_dataset / "passages.jsonl").open())
    assert sorted(p.name for p in index.iterdir()) == ["dense"]


# --- 4. leftovers of killed runs -------------------------------------------------------------------------


def test_leftovers_of_a_killed_run_are_cleaned_by_the_next_run(news_corpus: Any, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    result = runner.invoke(app, ["build-dataset", str(news_corpus.folder), "--format", "generic", "--out", str(out)])
    assert result.exit_code == 0, result.output
    # What a killed atomic_directory / atomic_file leaves beside OUT, and a neighbour's that must stay.
    partial = tmp_path / ".ds.k3x9_a2b.partial"
    (partial / "queries").mkdir(parents=True)
    (partial / "passages.jsonl").write_text("{}\n", encoding="utf-8")
    old = tmp_path / ".ds.old"
    old.mkdir()
    tmp_file = tmp_path / ".ds.a1b2c3d4.tmp"
    tmp_file.write_text("half", encoding="utf-8")
    other = tmp_path / ".ds2.a1b2c3d4.partial"
    other.mkdir()
    # While another process holds the lock (a bare filelock here: output_lock would clean up itself),
    # its temporaries are not touched.
    from filelock import FileLock

    with FileLock(str(lock_path_for(out))):
        fails("build-dataset", news_corpus.folder, "--format", "generic", "--out", out, "--overwrite")
    lock_path_for(out).unlink()
    assert partial.exists() and old.exists() and tmp_file.exists()
    result = runner.invoke(app, ["build-dataset", str(news_corpus.folder), "--format", "generic", "--out", str(out),
                                 "--overwrite"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ds2.a1b2c3d4.partial", "ds", "news"]


def test_a_kill_between_the_two_renames_restores_the_previous_output(tmp_path: Path) -> None:
    """atomic_directory replaces OUT by renaming OUT to .OUT.old, then the new folder to OUT: killed
    in between, OUT is missing; the next run puts the previous one back instead of deleting it."""
    (tmp_path / ".index.old").mkdir()
    (tmp_path / ".index.old" / "manifest.json").write_text("{}", encoding="utf-8")
    (tmp_path / ".index.zz9_8y7x.partial").mkdir()
    with output_lock(tmp_path / "index"):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]
    assert (tmp_path / "index" / "manifest.json").read_text(encoding="utf-8") == "{}"
    assert clean_stale_temporaries(tmp_path / "index") == []


# --- 5. a missing model folder -------------------------------------------------------------------------


def test_a_missing_model_folder_names_the_option(tiny_dataset: Path, tiny_run: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    queries = tiny_dataset / "queries" / "dev.jsonl"
    line = fails("search", "--index", "index", "--queries", queries, "--out", "run.trec", "--reader", "./nope")
    assert line == "error: --reader nope: no such model folder"  # typer hands the option over as a Path
    line = fails("query", "--index", "index", "--mention", "fire", "--reader", "./nope")
    assert "no such model folder" in line and "--reader" in line
    line = fails("index", tiny_dataset, "--out", "index", "--dense", "--encoder", "./nope")
    assert line == "error: --encoder ./nope: no such model folder"
    line = fails("index", tiny_dataset, "--out", "index", "--dense", "--encoder", "~/surely-not-a-model-here")
    assert line == "error: --encoder ~/surely-not-a-model-here: no such model folder"
    line = fails("train", "retriever", tiny_dataset, "--out", "model", "--base-model", "./nope")
    assert line == "error: --base-model ./nope: no such model folder"
    line = fails("train", "reader", tiny_dataset, "--run", tiny_run, "--out", "model", "--base-model", "models/nope")
    assert line == "error: --base-model models/nope: no such model folder"
    assert sorted(p.name for p in tmp_path.iterdir()) == []
