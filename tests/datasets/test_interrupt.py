"""Ctrl-C during `build-dataset` stops it: exit 130, one line, nothing left at --out.

Python drops an exception raised while a finaliser runs (a file object or a generator that the
garbage collector cleans up), so a Ctrl-C landing there was lost and the build carried on to a
complete dataset. The readers close what they read in normal code; these tests raise the
interrupt exactly there, check that every file is closed before an error leaves the reader, and
send SIGINT to a real build process at moments spread over its run while busy processes compete
for the CPU (scripts/interrupt_build.py does the same at many more moments, with a table).
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest
from interrupt_helpers import ECBPLUS_TARBALL, INTERRUPTED_EXIT, INTERRUPTED_MESSAGE, interrupt_at, leftovers, table
from typer.testing import CliRunner

import corefsearch.io.read as io_read
from corefsearch.base.errors import InputError
from corefsearch.cli import app
from corefsearch.datasets.build import BuildOptions, build_dataset
from corefsearch.datasets.coresearch import read_coresearch
from corefsearch.datasets.ecbplus import read_validated_sentences
from corefsearch.datasets.generic import CHUNK_SIZE, read_generic
from corefsearch.datasets.wec import read_wec

runner = CliRunner()


def build_ecbplus(out: Path) -> Any:
    return runner.invoke(app, ["build-dataset", str(ECBPLUS_TARBALL), "--format", "ecbplus", "--mention-type", "event",
                               "--out", str(out)])


def assert_interrupted(result: Any, out: Path) -> None:
    assert result.exit_code == INTERRUPTED_EXIT, result.output
    assert result.stderr.strip() == INTERRUPTED_MESSAGE
    assert leftovers(out) == []


def test_a_ctrl_c_while_a_tar_member_is_closed_stops_the_build(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    class InterruptedOnFifthClose(tarfile.ExFileObject):
        """A member file object whose fifth closing is where Ctrl-C lands."""

        closed_members = 0

        def close(self) -> None:
            already = self.closed
            super().close()
            if not already:
                InterruptedOnFifthClose.closed_members += 1
                if InterruptedOnFifthClose.closed_members == 5:
                    raise KeyboardInterrupt

    # What TarFile.extractfile makes the member's file object of.
    monkeypatch.setattr(tarfile.TarFile, "fileobject", InterruptedOnFifthClose)
    out = tmp_path / "dataset"
    assert_interrupted(build_ecbplus(out), out)
    assert InterruptedOnFifthClose.closed_members == 5  # read no further


def test_a_ctrl_c_as_the_partial_folder_is_made_leaves_nothing(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    real_mkdir = os.mkdir

    def mkdir_then_interrupt(path: Any, mode: int = 0o777, **kwargs: Any) -> None:
        real_mkdir(path, mode, **kwargs)
        if str(path).endswith(".partial"):
            raise KeyboardInterrupt

    monkeypatch.setattr(os, "mkdir", mkdir_then_interrupt)
    out = tmp_path / "dataset"
    assert_interrupted(build_ecbplus(out), out)


class InterruptedOnClose:
    """A file object (delegating to ``handle``) whose closing is where Ctrl-C lands."""

    def __init__(self, handle: IO[Any]) -> None:
        self.handle = handle

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)

    def __iter__(self) -> Any:
        return iter(self.handle)

    def __enter__(self) -> InterruptedOnClose:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.handle.close()
        raise KeyboardInterrupt


def _interrupt_on_close(monkeypatch: pytest.MonkeyPatch, opener: str, name: str) -> list[InterruptedOnClose]:
    """Make the files named ``name`` that ``corefsearch.io.read.<opener>`` opens interrupt on closing;
    returns them."""
    opened: list[InterruptedOnClose] = []
    real: Callable[..., IO[Any]] = getattr(io_read, opener)

    def interrupting(path: Path, *args: Any, **kwargs: Any) -> IO[Any] | InterruptedOnClose:
        handle = real(path, *args, **kwargs)
        if Path(path).name != name:
            return handle
        opened.append(InterruptedOnClose(handle))
        return opened[-1]

    monkeypatch.setattr(io_read, opener, interrupting)
    return opened


def _generic_with_a_bad_mention(folder: Path) -> Callable[[], Any]:
    folder.mkdir()
    # More documents than one chunk (read ahead together): the reader still holds corpus.jsonl open.
    documents = [{"doc_id": f"d{i}", "text": f"A storm {'hit' if i else 'struck'} the coast on day {i}."}
                 for i in range(CHUNK_SIZE + 10)]
    mentions = [{"mention_id": "m0", "doc_id": "d0", "start": 8, "end": 14, "cluster_id": "storm"},
                {"mention_id": "m1", "doc_id": "d1", "start": 8, "end": 99, "cluster_id": "storm"}]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in documents))
    (folder / "mentions.jsonl").write_text("".join(json.dumps(m) + "\n" for m in mentions))
    return lambda: build_dataset(read_generic(folder, passage="document"), folder.parent / "out", BuildOptions())


def _wec_with_a_bad_record(folder: Path) -> Callable[[], Any]:
    folder.mkdir()
    record = {"coref_chain": 1, "doc_id": "Storm", "mention_context": ["The", "storm", "hit"], "tokens_number": [1],
              "tokens_str": "storm", "mention_id": 0}
    records = [record, {**record, "mention_id": 1}, {**record, "mention_id": 2, "tokens_number": [7]}, record]
    path = folder / "mentions.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump(records, handle)
    return lambda: build_dataset(read_wec(path), folder.parent / "out", BuildOptions())


def _coresearch_with_a_bad_passage(folder: Path) -> Callable[[], Any]:
    folder.mkdir()
    passage = {"id": "p0", "goldChain": 7, "mention": "storm", "startIndex": 1, "endIndex": 1,
               "context": ["The", "storm", "hit"]}
    passages = [passage, {**passage, "id": "p1", "context": "The storm hit"}, {**passage, "id": "p2"}]
    (folder / "Test_all_passages.json").write_text(json.dumps(passages))
    (folder / "Test_queries.json").write_text(json.dumps([passage]))
    (folder / "Test_gold_clusters.json").write_text(json.dumps([{"clusterId": 7, "clusterTitle": "Storm",
                                                                 "mentionIds": ["p0", "p2"]}]))
    return lambda: build_dataset(read_coresearch(folder, ("test",)), folder.parent / "out", BuildOptions())


def _sentences_csv_with_a_bad_row(folder: Path) -> Callable[[], Any]:
    folder.mkdir()
    path = folder / "sentences.csv"
    path.write_text("Topic,File,Sentence Number\n1,10ecbplus,1\n1,10ecbplus,two\n1,10ecbplus,3\n")
    return lambda: read_validated_sentences(path)


@pytest.mark.parametrize(("opener", "name", "make", "message"), [
    ("open_text", "corpus.jsonl", _generic_with_a_bad_mention, "offsets"),
    ("open_json_bytes", "mentions.json.gz", _wec_with_a_bad_record, "outside its mention_context"),
    ("open_json_bytes", "Test_all_passages.json", _coresearch_with_a_bad_passage, "must be a list of strings"),
    ("open_text", "sentences.csv", _sentences_csv_with_a_bad_row, "must be integers"),
], ids=["generic", "wec", "coresearch", "ecbplus-sentences-csv"])
def test_a_ctrl_c_while_a_refused_files_reader_closes_it_is_not_lost(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opener: str, name: str,
        make: Callable[[Path], Callable[[], Any]], message: str) -> None:
    # The record refused, the reader's file is closed as the error leaves: in normal code, where the
    # Ctrl-C landing then is raised, not by the garbage collector in a finaliser, where it is dropped.
    opened = _interrupt_on_close(monkeypatch, opener, name)
    run = make(tmp_path / "input")
    with pytest.raises(KeyboardInterrupt) as caught:
        run()
    chain, error = [], caught.value.__context__
    while error is not None:
        chain.append(error)
        error = error.__context__
    assert any(isinstance(error, InputError) and message in str(error) for error in chain), chain
    assert opened and all(handle.closed for handle in opened)
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT is a POSIX signal")
def test_ctrl_c_at_moments_spread_over_a_build_under_load_stops_it_cleanly(tmp_path: Path) -> None:
    # 10 moments from the start of the build to 60 % of an uninterrupted one's time (the rest of the
    # run, to 95 %, and more moments: scripts/interrupt_build.py), with two processes spinning.
    reference, tries = interrupt_at(ECBPLUS_TARBALL, tmp_path, points=10, busy=2, last=0.6)
    report = table(reference, tries)
    assert sum(t.signalled for t in tries) >= 8, report
    assert all(not t.problems for t in tries), report + "\n\n" + "\n\n".join(t.stderr for t in tries if t.problems)
