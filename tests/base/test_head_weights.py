"""A head's weights on disk (``corefsearch.base.head_weights``): fp32 as trained, or int8 rows with one scale per
row, read back as fp32 by every model kind; small tensors stay as they are; a file whose metadata names another
storage is refused in one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import save_mention_encoder

from corefsearch.base.errors import InputError
from corefsearch.base.head_weights import (
    INT8_ROWS,
    QUANTIZED_KEY,
    SCALE_SUFFIX,
    head_precision,
    load_head_state,
    quantize_state,
    save_head,
)
from corefsearch.base.model_files import HEAD_FILES


def a_state() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(5)
    return {"mlp.0.weight": torch.randn(512, 256, generator=generator),
            "mlp.0.bias": torch.randn(512, generator=generator), "out.weight": torch.randn(2, 512, generator=generator)}


def test_fp32_is_stored_as_it_is(tmp_path: Path) -> None:
    state = a_state()
    save_head(state, tmp_path / "h.safetensors")
    assert head_precision(tmp_path / "h.safetensors") == "fp32"
    loaded = load_head_state(tmp_path / "h.safetensors")
    assert set(loaded) == set(state) and all(torch.equal(loaded[k], state[k]) for k in state)


def test_int8_rows_quantize_the_large_matrices_only_and_read_back_within_half_a_step(tmp_path: Path) -> None:
    state = a_state()
    stored = quantize_state(state)
    assert stored["mlp.0.weight"].dtype == torch.int8 and stored["mlp.0.weight" + SCALE_SUFFIX].shape == (512,)
    assert stored["mlp.0.bias"].dtype == torch.float32 and stored["out.weight"].dtype == torch.float32
    save_head(state, tmp_path / "h.safetensors", "int8")
    assert head_precision(tmp_path / "h.safetensors") == "int8"
    loaded = load_head_state(tmp_path / "h.safetensors")
    assert set(loaded) == set(state) and loaded["mlp.0.weight"].dtype == torch.float32
    step = state["mlp.0.weight"].abs().amax(dim=1, keepdim=True) / 127
    assert ((loaded["mlp.0.weight"] - state["mlp.0.weight"]).abs() <= step / 2 + 1e-6).all()
    assert not torch.equal(loaded["mlp.0.weight"], state["mlp.0.weight"])
    assert torch.equal(loaded["mlp.0.bias"], state["mlp.0.bias"])
    assert torch.equal(loaded["out.weight"], state["out.weight"])
    with pytest.raises(ValueError, match="head precision 'int4'"):
        save_head(state, tmp_path / "x.safetensors", "int4")


def test_a_zero_row_stays_zero() -> None:
    state = {"w": torch.zeros(300, 300)}
    assert torch.equal(quantize_state(state)["w"], torch.zeros(300, 300, dtype=torch.int8))


def test_a_model_reads_an_int8_head_and_refuses_an_unknown_storage(tiny_base: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    from corefsearch.cluster.model import MentionEncoder

    folder = save_mention_encoder(tiny_base, tmp_path / "enc")
    head = folder / HEAD_FILES["clusterer"]
    trained = load_file(str(head))
    save_head(trained, head, "int8")
    encoder = MentionEncoder.load(folder, "cpu")
    for key, value in encoder.head.state_dict().items():
        assert torch.allclose(value, trained[key], atol=float(trained[key].abs().max()) / 127)
    save_file(quantize_state(trained), str(head), metadata={"format": "pt", QUANTIZED_KEY: "int4-blocks"})
    with pytest.raises(InputError) as caught:
        MentionEncoder.load(folder, "cpu")
    message = str(caught.value)
    assert str(head) in message and "int4-blocks" in message and INT8_ROWS in message and "\n" not in message
