"""Tokenizer styles trained with the Hugging Face `tokenizers` library, and a seeded corpus of diverse
strings. Used by the tokenizer.json parity test (tests/tokenizer/hf_tokenizers_ref.py) and by
`unstuck bench tokenizer` (scripts/bench_tokenizer.py).

Styles: GPT-2 byte-level BPE ("left right" merges), Llama-3-style split regex with ignore_merges and a
BOS template, Qwen2-style with NFC and added tokens using lstrip/rstrip/single_word/normalized, and
SentencePiece-style BPE with byte fallback in its Metaspace and its legacy Prepend+Replace form.
"""
import json
import random

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from tokenizers import AddedToken

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

SPECIALS = ["<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>",
            "<unk>", "<think>", "<mask>", "[WORD]", "<ref>", "café"]

WORDS = {
    "en": "the quick brown fox jumps over lazy dog question answer model training reward token".split(),
    "fr": "élève café naïve où déjà garçon œuvre être forêt".split(),
    "de": "straße größe über Mädchen Fußball schön".split(),
    "el": "καλημέρα κόσμε αλφάβητο Ελλάδα".split(),
    "ru": "привет мир сегодня хорошо ПРИВЕТ".split(),
    "ar": "مرحبا بالعالم كتاب العربية".split(),
    "he": "שלום עולם ספר".split(),
    "hi": "नमस्ते दुनिया हिन्दी किताब".split(),
    "zh": ["你好", "世界", "机器学习", "数学", "问题"],
    "ja": ["こんにちは", "カタカナ", "日本語", "ひらがな"],
    "ko": ["안녕하세요", "세계", "한국어"],
    "th": ["สวัสดี", "ภาษาไทย"],
}
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "🙂", "🚀", "🧮", "✅", "🤖"]
NUMBERS = ["0", "7", "42", "123", "2024", "1234567890", "3.14159", "1,000,000", "-17", "٣٤٥", "²", "１２３", "½",
           "0x1F", "1e-5", "99999999999999"]
LATEX = [r"\frac{a}{b}", r"$x^2 + y_1$", r"\boxed{42}", r"\sum_{i=1}^{n} i^2", r"\sqrt{2}", r"\alpha\beta",
         r"\left( \frac{1}{2} \right)", r"\int_0^\infty e^{-x}\,dx"]
CODE = ["def f(x):\n    return x**2", "for (int i = 0; i < n; ++i) {", "if (a && b) { return; }",
        '{"key": [1, 2, 3]}', "x = y->z;", "#include <vector>", "print('hello')", "a[i] += b[j] * 2;"]
WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", " \n ", "\r\n", "\u00a0", "\u3000", "\u2028",
              "\u0085", "\u2009", "        "]
PUNCT = ["!", "?", "!!!", "???", "...", "—", "«", "»", "“", "”", "'", "\"", "(", ")", ",", ";", ":", "-", "_",
         "@", "#", "%", "&", "*"]
CONTRACTIONS = ["don't", "I'M", "we'LL", "it's", "they've", "you'd", "She'S", "O'Neil", "'tis"]
ODD = ["\x00", "\x07", "\u200b", "\u200d", "\ufeff", "e\u0301", "A\u030a", "ﬁ", "Ⅻ", "ｆｕｌｌ", "\U0001d400",
       "\u0301", "\ud7ff", "\U0010fffd"]

TRICKY = [
    "", " ", "  ", "\n", "hello", " hello", "  hello", "hello ", "hello  ", "hello world", "Hello World!",
    "<|endoftext|>", " <|endoftext|>", "<|endoftext|> ", "a<|endoftext|>b", "<|endoftext|><|endoftext|>",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", "<s>", "<s> hello", "hello</s>",
    "<s><s></s>", "<unk>", "<|endoftext", "|endoftext|>", "<|im_start", "a <mask> b", "a  <mask>  b",
    "<mask>", "[WORD]", "a[WORD]b", "a [WORD] b", "x_[WORD]", "<think>\nstep</think>", "<think><think>",
    "12345", "1234567", "3.14", "¹²³", "🤖🤖🤖", "👨‍👩‍👧‍👦", "e\u0301", "café", "cafe\u0301", "\r\n\r\n", " \n\n ",
    "\t\tindent", "trailing\n", "   leading", "a\u00a0b", "a\u0085b", "\u0085", "x\u3000y", "don't", "DON'T",
    "'s", "''", "\\boxed{}", "$$", "a" * 3000, "ab" * 1500, "🙂" * 400, "1" * 1000, " " * 500, "\n" * 300,
    "é" * 700, "你好" * 300, "a " * 800, "<|endoftext|>" * 50,
]


def make_corpus(seed, count):
    rng = random.Random(seed)
    fragments = [w for ws in WORDS.values() for w in ws] + EMOJI + NUMBERS + LATEX + CODE + PUNCT + CONTRACTIONS
    pools = [fragments, fragments, EMOJI, NUMBERS, LATEX, CODE, SPECIALS, ODD, PUNCT, CONTRACTIONS]
    out = []
    while len(out) < count:
        parts = []
        for _ in range(rng.randint(1, 10)):
            pool = rng.choice(pools)
            parts.append(rng.choice(pool))
            parts.append(rng.choice(["", " ", " ", " ", rng.choice(WHITESPACE)]))
        s = "".join(parts)
        if rng.random() < 0.1:
            s = rng.choice(WHITESPACE) + s
        if rng.random() < 0.05:
            s = s.upper()
        out.append(s)
    return out


def train_corpus():
    return make_corpus(1234, 3000)


def byte_level(style):
    tok = Tokenizer(models.BPE(ignore_merges=(style == "llama3")))
    specials = {"gpt2": ["<|endoftext|>"],
                "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
                "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]}[style]
    if style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        pattern = LLAMA3_PATTERN if style == "llama3" else QWEN2_PATTERN
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    if style == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_corpus(), trainer)
    if style == "llama3":
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
                                          special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    if style == "qwen2":
        tok.add_tokens([AddedToken("<think>", special=False, normalized=False),
                        AddedToken("[WORD]", single_word=True, normalized=False),
                        AddedToken("café", normalized=True), AddedToken("<ref>", normalized=True)])
        tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True)])
    data = json.loads(tok.to_str())
    if style == "gpt2":  # the older "left right" form of merges
        data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]
    return data


def sentencepiece_style(legacy):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False,
                                  limit_alphabet=300)
    tok.train_from_iterator(train_corpus(), trainer)
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for b in range(256):  # byte fallback pieces, as in Llama 2's vocabulary
        vocab.setdefault("<0x%02X>" % b, len(vocab))
    if legacy:
        data["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        data["pre_tokenizer"] = None
    else:
        data["normalizer"] = None
        data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    data["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    bos = vocab["<s>"]
    data["post_processor"] = {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                         {"Sequence": {"id": "A", "type_id": 0}}],
                              "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                       {"Sequence": {"id": "A", "type_id": 0}},
                                       {"Sequence": {"id": "B", "type_id": 1}}],
                              "special_tokens": {"<s>": {"id": "<s>", "ids": [bos], "tokens": ["<s>"]}}}
    return data


STYLES = {
    "gpt2": lambda: byte_level("gpt2"),
    "llama3": lambda: byte_level("llama3"),
    "qwen2": lambda: byte_level("qwen2"),
    "sentencepiece": lambda: sentencepiece_style(legacy=False),
    "sentencepiece_legacy": lambda: sentencepiece_style(legacy=True),
}
