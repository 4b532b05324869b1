"""Dense retrieval (a wing): the DPR-style bi-encoder of CoreSearch, its FAISS index and its training.

``encoder``: a mention-aware text encoder (boundary tokens around the query mention, [CLS] or mean
pooling); ``model``: a retriever (query and passage encoders, saved as Hugging Face folders);
``st_export``: the sentence-transformers configuration written beside them. The index: ``faiss_index``
(flat, HNSW and IVF-PQ indexes and their search settings), the write side that encodes passages in
resumable chunks and shards and writes the index, and the read side (the layout and manifest of
``INDEX/dense``) that ``search`` opens: a dense searcher over it. Training: ``examples`` (query,
positive, hard negative), ``mining`` (BM25 hard negatives in a child process), ``loss`` (in-batch NLL)
and ``train`` (the training task on the shared loop of :mod:`corefsearch.training`).
"""
