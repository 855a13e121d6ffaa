"""Python side of `unstuck bench tokenizer`: the Hugging Face `tokenizers` baseline, on one thread.

  bench_tokenizer.py train STYLE OUT_DIR        train a tokenizer of STYLE (hf_tokenizer_styles.py)
  bench_tokenizer.py corpus OUT_FILE MEGABYTES  write a seeded corpus of diverse lines
  bench_tokenizer.py time TOKENIZER_JSON TEXT_FILE REPEATS
      encode the lines of TEXT_FILE (split on "\\n") as one batch on one thread, REPEATS times; print
      one JSON object with the best time, the bytes, the token count and a checksum of the ids (the
      C++ side compares them)
"""
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_tokenizer_styles import STYLES, make_corpus  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

CHECKSUM_MOD = (1 << 61) - 1


def checksum(all_ids):
    """Same formula as bench_tokenizer.cpp: h = h * 1000003 + id + 1 (mod 2^61 - 1) over every id."""
    h = 0
    for ids in all_ids:
        for i in ids:
            h = (h * 1000003 + i + 1) % CHECKSUM_MOD
    return h


def main(argv):
    if len(argv) == 4 and argv[1] == "train":
        out = Path(argv[3])
        out.mkdir(parents=True, exist_ok=True)
        (out / "tokenizer.json").write_text(json.dumps(STYLES[argv[2]](), ensure_ascii=False), encoding="utf-8")
    elif len(argv) == 4 and argv[1] == "corpus":
        target = float(argv[3]) * 1e6
        lines, size, seed = [], 0, 7
        while size < target:
            for s in make_corpus(seed, 1000):
                lines.append(s)
                size += len(s.encode("utf-8")) + 1
            seed += 1
        Path(argv[2]).write_text("\n".join(lines), encoding="utf-8")
    elif len(argv) == 5 and argv[1] == "time":
        tok = Tokenizer.from_file(argv[2])
        lines = Path(argv[3]).read_bytes().decode("utf-8").split("\n")
        best, ids = float("inf"), None
        for _ in range(int(argv[4])):
            t0 = time.perf_counter()
            # encode_batch: the library's own loop in Rust (serial: TOKENIZERS_PARALLELISM=false), so
            # no Python call overhead per line is counted against it.
            ids = [e.ids for e in tok.encode_batch(lines, add_special_tokens=False)]
            best = min(best, time.perf_counter() - t0)
        print(json.dumps({"seconds": best, "bytes": sum(len(line.encode("utf-8")) for line in lines),
                          "tokens": sum(len(i) for i in ids), "checksum": checksum(ids)}))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
