"""One encoding path: the call bench/encode_speed.py times and `index --dense` both run
``corefsearch.dense.chunks.encode_chunk``, in the token-sorted batches of ``encode_passages``, and give the
same vectors bit for bit. A tiny random BERT over the small generic dataset (conftest.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import numpy as np
import pytest
from helpers import bench_module, index_contents
from typer.testing import CliRunner

from corefsearch.cli import app
from corefsearch.datasets.dataset import Dataset
from corefsearch.dense import chunks
from corefsearch.dense.encoder import DEFAULT_BATCH_SIZE, TextEncoder
from corefsearch.dense.model import BiEncoder

pytestmark = pytest.mark.usefixtures("one_thread")


def calls_of(code: CodeType, work: Callable[[], Any]) -> tuple[int, Any]:
    """How many times ``work()`` enters the function of ``code`` (however it was imported), and its result."""
    calls = 0

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call" and frame.f_code is code:  # a generator's every resumption counts too
            calls += 1

    sys.setprofile(profile)
    try:
        result = work()
    finally:
        sys.setprofile(None)
    return calls, result


@pytest.fixture(scope="module")
def encode_speed() -> Any:
    return bench_module("encode_speed")


def test_the_speed_bench_times_what_index_dense_runs(encode_speed: Any, tiny_base: Path, small_dataset: Path,
                                                     tmp_path: Path) -> None:
    passages = list(Dataset(small_dataset).passages())
    titles, texts = [p.title for p in passages], [p.text for p in passages]
    model = encode_speed.load(tiny_base, "torch", 1)
    assert encode_speed.BATCH == DEFAULT_BATCH_SIZE < len(texts)  # several batches, at index --dense's default
    bench_calls, timed = calls_of(chunks.encode_chunk.__code__,
                                  lambda: encode_speed.encode_as_indexed(model, titles, texts, encode_speed.BATCH))
    out = tmp_path / "index"
    index_calls, result = calls_of(chunks.encode_chunk.__code__, lambda: CliRunner().invoke(app, [
        "index", str(small_dataset), "--dense", "--encoder", str(tiny_base), "--device", "cpu", "--out", str(out)]))
    assert result.exit_code == 0, result.output
    assert bench_calls >= 1 and index_calls >= 1  # one chunk each (8,192 passages a chunk)
    ids, vectors = index_contents(out)
    assert ids == [p.id for p in passages]
    assert np.array_equal(vectors, timed)  # the same batches: the same bits
    assert np.array_equal(timed, model.passage_encoder.encode_passages(titles, texts, model.config.max_passage_len))


def test_encode_chunk_hands_the_whole_chunk_to_the_token_sorted_batches(tiny_base: Path, small_dataset: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    passages = list(Dataset(small_dataset).passages())
    titles, texts = [p.title for p in passages], [p.text for p in passages]
    model = BiEncoder.load(str(tiny_base), "cpu")
    drawn: list[int] = []
    batches = TextEncoder.passage_batches

    def counted(self: TextEncoder, *args: Any, **kwargs: Any) -> Any:
        for rows, vectors in batches(self, *args, **kwargs):
            lengths = [len(model.passage_encoder.tokenizer(titles[i] or "", texts[i], truncation="longest_first",
                                                           max_length=model.config.max_passage_len)["input_ids"])
                       for i in rows]
            drawn.append(max(lengths))
            yield rows, vectors

    monkeypatch.setattr(TextEncoder, "passage_batches", counted)
    timer = [0.0]
    items = list(chunks.encode_chunk(model, titles, texts, 10, timer))
    assert items[:-1] == [10] * (len(texts) // 10) + ([len(texts) % 10] if len(texts) % 10 else [])
    assert drawn == sorted(drawn) and len(drawn) == len(items) - 1  # one window: batches by growing token count
    assert timer[0] > 0
    assert np.array_equal(items[-1], chunks.chunk_vectors(model, titles, texts, 10, [0.0]))
