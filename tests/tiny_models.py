"""Tiny randomly initialised BERTs for the tests: one builder instead of one per test file.

Every model is 2 layers, 32 wide, with random weights seeded by ``seed``; only the vocabulary
(and the longest input) changes between the tests that use them.
"""

from __future__ import annotations

import collections
import re
import string
from pathlib import Path

from corefsearch.datasets.dataset import Dataset

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
