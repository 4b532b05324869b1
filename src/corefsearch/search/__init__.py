"""The search stages: retrieve, re-rank, a second round, spans and the answer as a cluster.

``backends`` (the index backends by name, ``lucene`` and ``dense``: build, append, open), ``retriever``
(one interface over them, opened once), ``hybrid`` (BM25 and dense fused), ``flow`` (the one query flow
that ``search``, ``query`` and ``serve`` run, its options checked once), ``engine`` (one warm engine for
``query`` and ``serve``), ``pipeline`` (``search`` over a queries file into a run, and ``index``),
``expansion`` (the second round and the cluster answer), ``run_writer`` (the run, its metadata and
spans), ``add`` (documents appended to a dataset and its indexes).
"""
