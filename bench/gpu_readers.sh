#!/usr/bin/env bash
# Reader recipes on a GPU host that has PyTorch but no Java, no corefsearch install and no network.
#
#   bash bench/gpu_readers.sh prepare RETRIEVER DATASET TRAIN_DEV_RUN TEST_RUN [WHEELS_DIR]   (here, on the CPU)
#   bash bench/gpu_readers.sh run OUT_DIR                                                      (there, on the GPU)
#
# `prepare` packs into .gpu/ (git-ignored, < 64 MB) what the GPU host lacks: the trained
# retriever's query encoder as fp16 safetensors (the readers start from it), the dataset, the
# first-stage runs cut to the top 50 the readers train on and re-rank, and the wheels of the
# pure-Python/small dependencies (ijson, ir-measures, pytrec-eval-terrier) and Pyserini's fusion code. The BM25 half of the
# hybrid runs needs Lucene, so the runs are made here by `corefsearch search`.
#
# `run` restores the encoder to fp32, trains each reader recipe of RECIPES with `corefsearch train
# reader` (several at once: one small cross-encoder leaves the card mostly idle), re-ranks the
# test run's top 50 with each (bench/rerank_run.py; the RRF with the first stage is computed back
# here from the reader's scores, as `order_reranked` does) and leaves the runs, spans, dev curves and
# cards in OUT_DIR/readers.tgz. A global deadline (DEADLINE_S, default 540 s) stops what has not
# finished, so whatever did finish comes back. Scoring happens back here (bench/e2e_score.py).
set -uo pipefail
mode=${1:?prepare|run}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

if [ "$mode" = prepare ]; then
  retriever=${2:?RETRIEVER}; dataset=${3:?DATASET}; train_dev=${4:?TRAIN_DEV_RUN}; test_run=${5:?TEST_RUN}
  wheels=${6:-.whl}
  rm -rf .gpu && mkdir -p .gpu/stage/retriever/query_encoder .gpu/stage/runs
  cp "$retriever"/*.json "$retriever"/README.md .gpu/stage/retriever/
  find "$retriever/query_encoder" -maxdepth 1 -type f ! -name model.safetensors -exec cp {} .gpu/stage/retriever/query_encoder/ \;
  cp -r "$retriever/query_encoder/1_Pooling" .gpu/stage/retriever/query_encoder/ 2>/dev/null || true
  python - "$retriever/query_encoder/model.safetensors" .gpu/encoder-fp16.safetensors <<'EOF'
import sys
from safetensors.torch import load_file, save_file
save_file({k: v.half() if v.is_floating_point() else v for k, v in load_file(sys.argv[1]).items()}, sys.argv[2])
EOF
  cp -r "$dataset" .gpu/stage/dataset
  python - "$train_dev" .gpu/stage/runs/train-dev.trec "$test_run" .gpu/stage/runs/test.trec <<'EOF'
import sys
for src, dst in ((sys.argv[1], sys.argv[2]), (sys.argv[3], sys.argv[4])):
    with open(src) as f, open(dst, "w") as out:
        for line in f:
            if int(line.split()[3]) <= 50:
                out.write(line)
EOF
  tar -C .gpu/stage -czf .gpu/stage.tgz . && rm -rf .gpu/stage
  # the dev evaluation fuses by RRF with Pyserini's fusion module: its two pure-Python packages travel
  # (Pyserini itself, with its Lucene jars, is too large to carry and needs Java there)
  pyserini=$(python -c "import os, pyserini; print(os.path.dirname(pyserini.__file__))")
  mkdir -p .gpu/pyshim/pyserini && touch .gpu/pyshim/pyserini/__init__.py
  cp -r "$pyserini/fusion" "$pyserini/trectools" .gpu/pyshim/pyserini/
  find .gpu/pyshim -name __pycache__ -prune -exec rm -rf {} +
  mkdir -p .gpu/wheels && cp "$wheels"/ijson-*.whl "$wheels"/ir_measures-*.whl "$wheels"/pytrec_eval_terrier-*.whl .gpu/wheels/
  du -sh .gpu
  exit 0
fi

out=${2:?OUT_DIR}
deadline=$(( $(date +%s) + ${DEADLINE_S:-540} ))
export PYTHONUNBUFFERED=1 COREFSEARCH_QUIET=1
[ -n "${SKIP_WHEELS:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/wheels/*.whl || exit 1
export PYTHONPATH="$here/src:/tmp/site:$here/.gpu/pyshim"
W=${WORK:-/tmp/gpu-readers}; rm -rf "$W"; mkdir -p "$W/out"
tar -C "$W" -xzf .gpu/stage.tgz
python3 - .gpu/encoder-fp16.safetensors "$W/retriever/query_encoder/model.safetensors" <<'EOF'
import sys
from safetensors.torch import load_file, save_file
save_file({k: v.float() if v.is_floating_point() else v for k, v in load_file(sys.argv[1]).items()}, sys.argv[2])
EOF
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true
DEVICE=${DEVICE:-auto}
TESTQ="$W/dataset/queries/test.jsonl"
if [ -n "${TEST_LIMIT:-}" ]; then head -n "$TEST_LIMIT" "$TESTQ" > "$W/test-sample.jsonl"; TESTQ="$W/test-sample.jsonl"; fi

# name|options: the CPU recipe of bench/e2e.py (1 epoch, 11 negatives, lr 5e-5) and variations of
# it one at a time, and the CLI's defaults (3 epochs x 23 negatives, lr 2e-5) at 2 epochs.
LANES=${LANES:-"cpu-recipe|--epochs 1 --negatives 11 --lr 5e-5;span2|--epochs 1 --negatives 11 --lr 5e-5 --span-weight 2
pairwise|--epochs 1 --negatives 11 --lr 5e-5 --ranking-loss softmax+pairwise;neg23|--epochs 1 --negatives 23 --lr 5e-5
full|--epochs 2 --negatives 23 --lr 2e-5"}
EXTRA=${EXTRA:-}

one() {  # train one recipe, then re-rank the test run with it
  local name=$1 opts=$2 left
  left=$(( deadline - $(date +%s) ))
  [ "$left" -gt 30 ] || { echo "$name: no time left" >> "$W/out/$name.log"; return; }
  local started=$(date +%s)
  # shellcheck disable=SC2086
  timeout "$left" python3 -m corefsearch.cli train reader "$W/dataset" --run "$W/runs/train-dev.trec" \
      --out "$W/$name" --base-model "$W/retriever" --head integrated --negatives-from 50 --device "$DEVICE" \
      --dev-max-queries 500 --log-every 200 $opts $EXTRA > "$W/out/$name.log" 2>&1 || { echo "$name: training stopped" >> "$W/out/$name.log"; return; }
  echo "train_seconds $(( $(date +%s) - started ))" >> "$W/out/$name.log"
  mkdir -p "$W/out/$name"
  cp "$W/$name"/*.json "$W/$name"/README.md "$W/out/$name/" 2>/dev/null
  left=$(( deadline - $(date +%s) ))
  [ "$left" -gt 10 ] || { echo "$name: no time left to re-rank" >> "$W/out/$name.log"; return; }
  timeout "$left" python3 bench/rerank_run.py --dataset "$W/dataset" --queries "$TESTQ" \
      --run "$W/runs/test.trec" --reader "$W/$name" --out "$W/out/$name/test.trec" --rerank-fusion reader \
      --device "$DEVICE" >> "$W/out/$name.log" 2>&1
}

lane() {  # the recipes of one lane, one after another
  local item
  IFS=';' read -ra items <<< "$1"
  for item in "${items[@]}"; do one "${item%%|*}" "${item#*|}"; done
}

while IFS= read -r spec; do lane "$spec" & done <<< "$LANES"
wait
tar -C "$W/out" -czf "$out/readers.tgz" .
ls -la "$out"
