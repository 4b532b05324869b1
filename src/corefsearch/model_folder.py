"""A model folder of an encoder with a head of corefsearch's own (the reader, the mention encoder):
the Hugging Face encoder and tokenizer as ``save_pretrained`` writes them, the head's weights in
safetensors and the model's settings in a JSON file, so that transformers opens the encoder as it is
and the head and settings travel beside it."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

from corefsearch.errors import InputError


class EncoderWithHead:
    """Saving, loading the head, and train/eval mode of ``model`` + ``head`` with ``config``.

    Subclasses set ``CONFIG_FILE``, ``HEAD_FILE`` and ``HEAD_NAME`` (how an error names the head)."""

    CONFIG_FILE: ClassVar[str]
    HEAD_FILE: ClassVar[str]
    HEAD_NAME: ClassVar[str] = "the head"

    model: Any
    tokenizer: Any
    head: Any
    config: Any
    device: str

    def _attach(self, model: Any, tokenizer: Any, config: Any, device: str) -> None:
        """Check ``config`` and the tokenizer (span offsets need a fast one), and hold them on ``device``."""
        config.validate()
        if not getattr(tokenizer, "is_fast", False):
            raise InputError("corefsearch needs a fast (Rust) tokenizer for character offsets; "
                             f"{type(tokenizer).__name__} is not one")
        self.model = model.to(device)
        self.tokenizer = tokenizer
        self.config = config
        self.device = device

    def load_head(self, folder: Path, remedy: str) -> None:
        """Load the head's weights saved in ``folder``; a file that is not safetensors, or holds other
        keys or shapes, is one line naming it."""
        from safetensors.torch import load_file

        path = Path(folder) / self.HEAD_FILE
        try:
            self.head.load_state_dict(load_file(str(path)))
        except Exception as err:  # SafetensorError (not safetensors), RuntimeError (other keys or shapes)
            why = " ".join(str(err).split())[:240]
            raise InputError(f"{path}: {self.HEAD_NAME} does not load ({type(err).__name__}: {why}); it must be "
                             f"the head saved with {self.CONFIG_FILE}: {remedy}") from None

    def save(self, folder: Path) -> None:
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(folder, safe_serialization=True)
        self.tokenizer.save_pretrained(folder)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()},
                  str(folder / self.HEAD_FILE))
        (folder / self.CONFIG_FILE).write_text(json.dumps(asdict(self.config), indent=2) + "\n", encoding="utf-8")

    def modules(self) -> list[Any]:
        return [self.model, self.head]

    def train(self, mode: bool = True) -> None:
        for module in self.modules():
            module.train(mode)
