"""File I/O shared by every stage (the floor: it knows no wing).

``read``: every text and JSON file a user gives, with FILE:LINE errors; ``write``: atomic writes of files
and directories, JSON lines, checksums; ``trec``: TREC run and qrels files; ``outputs``: output guards
(checked before the work, locked while written, leftovers of killed runs cleaned).

Import each name from its module (``from corefsearch.io.trec import read_run``).
"""
