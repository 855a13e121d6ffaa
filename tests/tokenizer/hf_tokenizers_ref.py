"""Reference side of the tokenizer.json parity test (test_hf_tokenizer.cpp).

`make OUT_DIR`: trains one BPE tokenizer per style with the `tokenizers` library (GPT-2 byte-level,
Llama-3-style split regex, Qwen2-style with NFC and added tokens with lstrip/rstrip/single_word,
SentencePiece-style BPE with byte fallback, in its Metaspace and its legacy Prepend+Replace form),
writes OUT_DIR/<style>/tokenizer.json, and OUT_DIR/reference.json with a seeded corpus of diverse
strings and, per style, the ids and decodes of `tokenizers` for each string.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from hf_tokenizer_styles import STYLES, TRICKY, make_corpus  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


def test_strings():
    return TRICKY + make_corpus(20261130, 2100)


def make(out_dir):
    out = Path(out_dir)
    strings = test_strings()
    reference = {"strings": strings, "styles": {}}
    for name, build in STYLES.items():
        data = build()
        (out / name).mkdir(parents=True, exist_ok=True)
        text = json.dumps(data, ensure_ascii=False)
        (out / name / "tokenizer.json").write_text(text, encoding="utf-8")
        tok = Tokenizer.from_str(text)
        encodings = tok.encode_batch(strings, add_special_tokens=False)
        ids = [e.ids for e in encodings]
        with_special = [e.ids for e in tok.encode_batch(strings, add_special_tokens=True)]
        decoded = [tok.decode(i, skip_special_tokens=False) for i in ids]
        decoded_skip = [tok.decode(i, skip_special_tokens=True) for i in ids]
        reference["styles"][name] = {"ids": ids, "ids_with_special": with_special, "decoded": decoded,
                                     "decoded_skip_special": decoded_skip}
    (out / "reference.json").write_text(json.dumps(reference, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "make":
        sys.exit("usage: hf_tokenizers_ref.py make OUT_DIR")
    make(sys.argv[2])
