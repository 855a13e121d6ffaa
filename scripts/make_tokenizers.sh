#!/usr/bin/env bash
# Rebuilds the character tokenizers shipped with the embedded tasks (data/<task>/tokenizer.model)
# from their training splits: every prompt and SFT completion, with <answer> and </answer> as
# single pieces. Run after regenerating data/<task>/train.jsonl (docs/TASKS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
UNSTUCK=${UNSTUCK:-build/unstuck}
for task in arithmetic countdown; do
  corpus=$(mktemp)
  python3 - "data/$task/train.jsonl" "data/$task/test.jsonl" >"$corpus" <<'PY'
import json, sys
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        print(r["prompt"] + "<answer>" + str(r["answer"]) + "</answer>")
PY
  "$UNSTUCK" tokenizer train --input "$corpus" --out "data/$task/tokenizer.model" \
    --model-type char --user-symbols '<answer>,</answer>'
  rm -f "$corpus"
done
