"""Exports of trained models to other runtimes (a stage: it knows every model kind).

``onnx``: ``corefsearch export-onnx MODEL_DIR``, the ONNX graphs (and their int8 quantisation) of a
retriever, reader, mention encoder or mention detector folder, beside its weights; ``graph``: the steps
after tracing, ONNX Runtime's transformer fusions (``--fuse``) and the dynamic int8 quantisation
(``--quantize-ops``); ``ship``: ``export-onnx MODEL_DIR --ship OUT --card CARD.json``, the inference-only
copy of a trained folder (its int8 export, no torch weights) with its machine-readable card.
"""
