"""Readers (a wing): cross-encoders that re-rank retrieved passages and mark the coreferring span.

``inputs``: ``[CLS] query window [SEP] passage window [SEP]`` with the mention marked and long
passages cut into strided windows; ``model``: the DPR reader and the integrated coreference reader
(Eirew et al. 2022) on a Hugging Face encoder; ``spans``: the best start/end token spans; ``read``:
a trained reader scoring a query's passages (torch or ONNX Runtime, windows batched by length);
``rerank``: ``--reader`` options and re-ranking a run's top N (by the reader, or fused with the
retriever's ranks); ``train``: the reader's training task on the shared loop, with ``batches`` (each
epoch's examples and the windows they are read in) and ``loss`` (the span and passage cross-entropies);
``arguments``: the options of ``train reader`` (defaults, help, checks), read without the trainer.
"""
