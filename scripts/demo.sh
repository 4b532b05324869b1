#!/usr/bin/env bash
# The BM25 pipeline end to end on the vendored ECB+ corpus: build the coreference-search
# dataset, index it with Lucene, search the test queries with two query formulations,
# evaluate both runs and print the table. Outputs go to work/demo (or $COREFSEARCH_DEMO_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
ensure_venv

work="${COREFSEARCH_DEMO_DIR:-work/demo}"
mkdir -p "$work/runs"

corefsearch build-dataset data/ecbplus/ECBplus.tar.gz --format ecbplus --mention-type event \
  --out "$work/ecbplus-events" --overwrite
corefsearch index "$work/ecbplus-events" --out "$work/index" --overwrite
for format in mention mention+entities; do
  corefsearch search --index "$work/index" --queries "$work/ecbplus-events/queries/test.jsonl" \
    --query-format "$format" --k 500 --out "$work/runs/bm25-$format.trec"
done
corefsearch query --index "$work/index" --k 3 --mention "charged" \
  --context "Polygamist sect leader Warren Jeffs was charged with sexual assault in Texas."
corefsearch evaluate "$work/runs/bm25-mention.trec" "$work/runs/bm25-mention+entities.trec" \
  --qrels "$work/ecbplus-events/qrels/test.txt"
