"""The search stages: retrieve, re-rank, a second round, spans and the answer as a cluster.

``retriever`` (one interface over the index backends, opened once), ``hybrid`` (BM25 and dense
fused), ``engine`` (one warm engine for ``query`` and ``serve``), ``pipeline`` (``search`` over a
queries file into a run), ``expansion`` (the second round and the cluster answer), ``run_writer``
(the run, its metadata and spans), ``add`` (documents appended to a dataset and its indexes).
"""
