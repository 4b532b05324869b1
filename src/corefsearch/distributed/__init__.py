"""The heavy stages on a Ray cluster (``--ray auto|ADDRESS``): dense encoding (``index --dense``),
a reader's re-ranking (``search --reader``), the mention encoder's encoding (``cluster --method
encoder``) and mention detection (``detect``). Without ``--ray`` nothing here runs and Ray is never
imported; this file imports nothing, so that ``corefsearch --help`` stays instant.

Same results as on one machine: every worker runs the function the local path runs, on the same
batches, so the vectors, runs and spans are those of the local path (bit for bit where the
workers' CPUs and thread counts are those of the local run; other hardware may change the last
bits of a float, as it does on one machine).

What moves between machines: the workers read the dataset's ``passages.jsonl`` and load the
models from the paths given on the command line (made absolute), so those must be visible at the
same path on every node (a shared file system), or be a Hugging Face name each node can load, or
``default``, the encoder bundled with corefsearch. corefsearch itself must be installed in the
Python environment of every node. Only the driver writes: the index directory, run and cluster
files need not be shared. Queries, retrieved hits, passage texts, tokenised mentions and the
vectors travel through Ray's object store.

Modules:

``session``: the connection to the cluster, shared by every stage: :class:`~session.RayOptions`
(``--ray``, ``--ray-workers``, ``--ray-cpus-per-worker``), :func:`~session.ray_session` (``ray.init``
and ``ray.shutdown`` around a run, keeping the JVM's native signal handlers: Lucene may be running
in the same process), how many workers the cluster has room for (:func:`~session.plan_workers`),
and how a worker's error comes back as the user's error (:func:`~session.worker_errors`,
:func:`~session.carried`).

``dense_encoding``: ``index --dense --ray``, :func:`~dense_encoding.build_dense_index_on_ray`: Ray
Data encodes whole chunks with the local path's ``encode_chunk``; the driver saves them into the
shards of ``--shard I/N`` and merges those as ``--merge-shards`` does.

``reranking``: ``search --reader --ray``, :func:`~reranking.rerank_on_ray`: blocks of queries
re-ranked by actors that loaded the reader once.

``mention_encoding``: ``cluster --method encoder --ray``: :class:`~mention_encoding.RayMentionEncoding`,
the strategy the cluster wing's ``cluster_dataset`` takes to encode its mentions on the cluster
(:func:`~mention_encoding.encode_mentions_on_ray`).

``detection``: ``detect --ray``: :class:`~detection.RayDetection`, the strategy ``detect_dataset`` takes to
detect each shard's passages in blocks on actors that loaded the detector once.
"""
