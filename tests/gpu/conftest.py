"""The ``gpu`` tests run where a CUDA GPU is (and, for FAISS's, a FAISS build with GPU support); elsewhere
each is skipped with the reason, which ``pytest -ra`` prints."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    import torch

    reason = None if torch.cuda.is_available() else "no CUDA GPU here (torch.cuda.is_available() is False)"
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def faiss_gpu() -> None:
    from corefsearch.base.faiss_gpu import faiss_gpus

    if faiss_gpus() == 0:
        pytest.skip("this FAISS build has no GPU support (faiss-cpu): `pip install \"corefsearch[gpu]\"`")
