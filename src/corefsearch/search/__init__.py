"""The search stages: retrieve, re-rank, a second round, spans and the answer as a cluster.

``options`` (the options of a search, resolved and checked once at the door: the retrieval, the reader, the
second round, the depth, the cluster answer), ``engine`` (the one door: what the options ask for, opened once;
``query`` and ``serve`` ask it questions, ``search`` runs a file through its flow), ``flow`` (the one query
flow: retrieve, re-rank, second round), ``pipeline`` (``search`` over a queries file into a run, ``query``'s
one question, and ``index``), ``backends`` (the index backends by name, ``lucene`` and ``dense``: build,
append, open), ``retriever`` (one interface over them, opened once), ``hybrid`` (BM25 and dense fused),
``second_round`` (the second round from the mentions the first found), ``calibration`` (its top 10 ordered
by a model fitted to the collection without gold), ``candidates`` (the candidate mentions
the mention encoder picks among), ``cluster_answer`` (the answer as a cluster), ``queries`` (the query of one
question), ``answers`` (the answer to one question), ``run_writer`` (the run, its metadata and spans), ``add``
(documents appended to a dataset and its indexes).
"""
