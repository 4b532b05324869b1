"""The mention-encoder tests (test_cluster_encoder.py, test_mention_encoder.py) run each test on one
torch thread (function scope: the module fixtures that build models run on torch's default)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers import one_torch_thread


@pytest.fixture
def one_thread_each_test() -> Iterator[None]:
    with one_torch_thread():
        yield
