"""Reference side of the tokenizer.json parity test (test_hf_tokenizer.cpp).

`make OUT_DIR`: trains one BPE tokenizer per style with the `tokenizers` library (GPT-2 byte-level,
Llama-3-style split regex, Qwen2-style with NFC and added tokens with lstrip/rstrip/single_word,
SentencePiece-style BPE with byte fallback, in its Metaspace and its legacy Prepend+Replace form),
writes OUT_DIR/<style>/tokenizer.json, and OUT_DIR/reference.json with a seeded corpus of diverse
strings and, per style, the ids and decodes of `tokenizers` for each string.

It also trains a SentencePiece BPE model with byte fallback (as Llama 2's) with the `sentencepiece`
trainer and writes OUT_DIR/spm_<config>/{tokenizer.model, tokenizer_config.json} for several
LlamaTokenizer configs; their reference is transformers' AutoTokenizer on the same strings.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from hf_tokenizer_styles import STYLES, TRICKY, make_corpus  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


def test_strings():
    return TRICKY + make_corpus(20261130, 2100)


SPM_CONFIGS = {
    "spm_llama2": {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
                   "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "legacy": False},
    "spm_legacy": {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "bos_token": "<s>",
                   "eos_token": "</s>", "legacy": True},
    "spm_bos_eos_no_prefix": {"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": True,
                              "add_eos_token": True, "add_prefix_space": False, "bos_token": "<s>",
                              "eos_token": "</s>"},
    "spm_minimal": {"tokenizer_class": "LlamaTokenizer"},
}


def train_spm(model_file):
    import sentencepiece as spm
    corpus = Path(model_file).parent / "corpus.txt"
    corpus.write_text("\n".join(s.replace("\n", " ") for s in make_corpus(1234, 3000)), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(model_file)[:-len(".model")], model_type="bpe", vocab_size=1200,
        byte_fallback=True, split_digits=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        character_coverage=0.9995, user_defined_symbols=["<think>", "</think>"], minloglevel=2)
    corpus.unlink()


def transformers_reference(directory, strings):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(directory))
    ids = [tok(s, add_special_tokens=False)["input_ids"] for s in strings]
    return {"ids": ids, "ids_with_special": [tok(s)["input_ids"] for s in strings],
            "decoded": [tok.decode(i, skip_special_tokens=False) for i in ids],
            "decoded_skip_special": [tok.decode(i, skip_special_tokens=True) for i in ids]}


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
    model = out / "spm.model"
    train_spm(model)
    for name, config in SPM_CONFIGS.items():
        (out / name).mkdir(parents=True, exist_ok=True)
        (out / name / "tokenizer.model").write_bytes(model.read_bytes())
        (out / name / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
        reference["styles"][name] = transformers_reference(out / name, strings)
    (out / "reference.json").write_text(json.dumps(reference, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "make":
        sys.exit("usage: hf_tokenizers_ref.py make OUT_DIR")
    make(sys.argv[2])
