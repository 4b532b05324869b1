"""The dense retriever (DPR, as in CoreSearch): its encoders and model, its training, and the FAISS
index of the passages' vectors, written and read apart.

``encoder``: the mention-aware query and passage encoders; ``model``: the retriever (the two
encoders, saved and loaded); ``st_export``: its sentence-transformers files; ``examples``,
``mining``, ``loss`` and ``train``: ``train retriever``, whose options (defaults, help, checks) are
``arguments``, read by the command line without the trainer. The index: ``store``, its read side (the
layout of ``INDEX/dense``, the manifest, the encoder it names), what searchers and the other stages
read; ``chunks``, the pieces a build is made of (chunk plan, encoding and saving chunks, resuming,
vector files, the shard and index folders), shared by a build, ``corefsearch add`` and the Ray
path; ``indexing``, the entry points (``build_dense_index``, ``merge_dense_shards``);
``faiss_index``, the FAISS index types and their settings; ``search``: ``DenseSearcher``.
"""
