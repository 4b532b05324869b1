"""The peer's rows of bench/encode_speed.py and bench/reader_speed.py: sentence-transformers'
``SentenceTransformer`` (``--kind encode``) or ``CrossEncoder`` (``--kind rerank``) with its torch,
ONNX and dynamic int8 ONNX backends, in a process of its own.

It runs in the peer's own environment when its pins conflict with corefsearch's (its ONNX backend
needs ``optimum[onnxruntime]``, which pins older transformers: ``python3 -m venv work/peer-venv &&
work/peer-venv/bin/pip install 'sentence-transformers[onnx]'``), and is driven by the bench over
JSON lines, so that the bench keeps its rows taking turns with corefsearch's:

- it answers ``{"ready": {"rows": [...], "skipped": {row: why}, "versions": {...}}}`` once loaded;
- ``{"op": "data", "texts": [...]}`` (encode) holds the texts to encode;
- ``{"op": "run", "row": ROW}`` (encode: the held texts) or ``{"op": "run", "row": ROW, "pairs":
  [[query, passage], ...]}`` (rerank), with an optional ``"batch"`` (default ``--batch``), answers
  ``{"seconds": s}``: the time of ``encode`` / ``predict`` alone, measured here (the pipe is not timed);
- ``{"op": "quit"}`` (or the end of its input) ends it.

The ONNX models are exported as sentence-transformers does it (``backend="onnx"`` from the model
folder, through Optimum), into a copy of the model folder under ``--work``, and quantised by its
``export_dynamic_quantized_onnx_model`` with each of ``--int8`` (``avx512_vnni``: int8 weights;
``avx2``: uint8 weights; both per channel, every MatMul). ONNX Runtime gets ``--threads`` intra-op
threads, torch as many.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ENCODE, RERANK = "encode", "rerank"


def _session_options(threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return options


def _load(kind: str, folder: str, backend: str, threads: int, max_length: int, file_name: str | None = None) -> Any:
    from sentence_transformers import CrossEncoder, SentenceTransformer

    kwargs: dict[str, Any] = {}
    if backend == "onnx":
        kwargs = {"session_options": _session_options(threads), "provider": "CPUExecutionProvider"}
        if file_name:
            kwargs["file_name"] = file_name
    if kind == ENCODE:
        model = SentenceTransformer(folder, device="cpu", backend=backend, model_kwargs=kwargs)
        model.max_seq_length = max_length
    else:
        model = CrossEncoder(folder, device="cpu", backend=backend, max_length=max_length, model_kwargs=kwargs,
                             num_labels=1)
    return model


def load_rows(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """The peer's models by row name, and the rows it could not load with why."""
    import torch

    torch.set_num_threads(args.threads)
    rows: dict[str, Any] = {"torch": _load(args.kind, args.model, "torch", args.threads, args.max_length)}
    skipped: dict[str, str] = {}
    names = ["onnx"] + [f"onnx-int8 ({config})" for config in args.int8]
    try:
        import optimum.onnxruntime  # noqa: F401
    except ImportError as err:
        return rows, dict.fromkeys(names, f"no optimum[onnxruntime] in {sys.executable} ({err})")
    work = Path(args.work) / f"peer-{args.kind}-model"
    if not (work / "onnx" / "model.onnx").is_file():
        shutil.rmtree(work, ignore_errors=True)
        if args.kind == ENCODE:
            shutil.copytree(args.model, work)
        else:  # a CrossEncoder of the base weights (a fresh one-label head), saved as its own folder
            rows["torch"].save_pretrained(str(work))
        exported = _load(args.kind, str(work), "onnx", args.threads, args.max_length)
        exported.save_pretrained(str(work))  # writes onnx/model.onnx
    rows["onnx"] = _load(args.kind, str(work), "onnx", args.threads, args.max_length)
    from sentence_transformers import export_dynamic_quantized_onnx_model

    for config in args.int8:
        name = f"onnx-int8 ({config})"
        file_name = f"onnx/model_qint8_{config}.onnx" if config != "avx2" else "onnx/model_quint8_avx2.onnx"
        try:
            if not (work / file_name).is_file():
                export_dynamic_quantized_onnx_model(rows["onnx"], config, str(work))
            rows[name] = _load(args.kind, str(work), "onnx", args.threads, args.max_length, file_name)
        except Exception as err:  # a quantisation config this sentence-transformers lacks
            skipped[name] = f"{type(err).__name__}: {err}"[:200]
    return rows, skipped


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": sys.executable}
    for name in ("sentence-transformers", "transformers", "torch", "onnxruntime", "optimum", "optimum-onnx"):
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found


class Peer:
    """The bench's end of a worker in ``python`` (the peer's environment): its rows, the rows it
    skipped and its versions once started; :meth:`run` times one row in the worker."""

    def __init__(self, python: str, kind: str, model: str, work: Path, threads: int, max_length: int, batch: int,
                 int8: str = "avx512_vnni,avx2") -> None:
        import subprocess

        command = [python, str(Path(__file__).resolve()), "--kind", kind, "--model", model, "--work", str(work),
                   "--threads", str(threads), "--max-length", str(max_length), "--batch", str(batch), "--int8", int8]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self._answer()["ready"]
        self.rows: list[str] = ready["rows"]
        self.skipped: dict[str, str] = ready["skipped"]
        self.versions: dict[str, str] = ready["versions"]

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the peer worker ended (exit status {self.process.wait()}); see its messages above")
        return json.loads(line)

    def _send(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def hold(self, texts: list[str]) -> None:
        self._send({"op": "data", "texts": texts})

    def run(self, row: str, pairs: list[tuple[str, str]] | None = None, batch: int | None = None) -> float:
        request: dict[str, Any] = {"op": "run", "row": row}
        if batch is not None:
            request["batch"] = batch
        if pairs is not None:
            request["pairs"] = [list(pair) for pair in pairs]
        return float(self._send(request)["seconds"])

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.process.stdin.close()
            self.process.wait(timeout=60)


def default_python(root: Path) -> str:
    """The peer's environment when there is one (``work/peer-venv``), else this Python."""
    peer = root / "work" / "peer-venv" / "bin" / "python"
    return str(peer) if peer.is_file() else sys.executable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=(ENCODE, RERANK), required=True)
    parser.add_argument("--model", required=True, help="A sentence-transformers / Hugging Face model folder.")
    parser.add_argument("--work", required=True, help="Where the exported copies go.")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=180)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--int8", default="avx512_vnni,avx2", help="Optimum quantisation configs, comma-separated.")
    args = parser.parse_args(argv)
    args.int8 = [c for c in args.int8.split(",") if c]
    out = sys.stdout
    sys.stdout = sys.stderr  # the libraries' prints stay off the answers
    rows, skipped = load_rows(args)
    print(json.dumps({"ready": {"rows": list(rows), "skipped": skipped, "versions": versions()}}), file=out,
          flush=True)
    texts: list[str] = []
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "quit":
            break
        if request["op"] == "data":
            texts = request["texts"]
            answer: dict[str, Any] = {"ok": True}
        else:
            model, batch = rows[request["row"]], int(request.get("batch", args.batch))
            began = time.perf_counter()
            if args.kind == ENCODE:
                model.encode(texts, batch_size=batch, show_progress_bar=False)
            else:
                model.predict([tuple(pair) for pair in request["pairs"]], batch_size=batch,
                              show_progress_bar=False)
            answer = {"seconds": time.perf_counter() - began}
        print(json.dumps(answer), file=out, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
