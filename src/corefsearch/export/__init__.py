"""Exports of trained models to other runtimes (a stage: it knows every model kind).

``onnx``: ``corefsearch export-onnx MODEL_DIR``, the ONNX graphs (and their int8 quantisation) of a
retriever, reader, mention encoder or mention detector folder, beside its weights.
"""
