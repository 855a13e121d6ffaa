#!/usr/bin/env python3
"""Converts Parquet dataset files (how GSM8K, MATH and verl-preprocessed datasets are distributed)
to the JSONL that `unstuck train` reads: one JSON object per row, nested columns kept as nested
JSON (verl's "prompt" list of messages, "reward_model": {"ground_truth": ...}), key order as in
the file. Map the fields with data.prompt_key / data.answer_key (docs/TASKS.md).

  scripts/parquet_to_jsonl.py IN.parquet [IN2.parquet ...] --out OUT.jsonl [--limit N]

e.g. GSM8K's main split:
  scripts/parquet_to_jsonl.py gsm8k/main/train-00000-of-00001.parquet --out data/gsm8k/train.jsonl
  scripts/parquet_to_jsonl.py gsm8k/main/test-00000-of-00001.parquet --out data/gsm8k/test.jsonl
Needs pyarrow (requirements.txt).
"""
import argparse
import base64
import datetime
import decimal
import json
import os
import sys


def plain(value):
    """JSON-ready form of the values pyarrow's to_pylist() returns beyond the JSON types."""
    if isinstance(value, (bytes, bytearray)):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(value).decode("ascii")
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    raise TypeError(f"cannot write a {type(value).__name__} as JSON")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", help="Parquet files, read in order")
    parser.add_argument("--out", required=True, help="JSONL file to write (parent folders are created)")
    parser.add_argument("--limit", type=int, default=0, help="most rows to write (0 = all)")
    args = parser.parse_args()
    try:
        import pyarrow.parquet as pq
    except ImportError:
        sys.exit("parquet_to_jsonl.py needs pyarrow: pip install -r requirements.txt")
    if os.path.dirname(args.out):
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
    written = 0
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as out:
        for path in args.inputs:
            table = pq.read_table(path)
            for batch in table.to_batches():
                for row in batch.to_pylist():
                    if args.limit and written >= args.limit:
                        break
                    out.write(json.dumps(row, ensure_ascii=False, default=plain) + "\n")
                    written += 1
    os.replace(tmp, args.out)
    print(f"wrote {written} records to {args.out}")


if __name__ == "__main__":
    main()
