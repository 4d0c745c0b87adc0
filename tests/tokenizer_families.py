"""Small tokenizers of every family a served model may ship, trained here with ``tokenizers``.

Nothing is downloaded: each tokenizer is trained on generated text (English-like syllable
words, or mostly CJK characters with a few Latin words) and set up the way its family's
``tokenizer.json`` is (pre-tokenizer, normalizer, decoder, BOS/EOS post-processor), then
wrapped in ``transformers.PreTrainedTokenizerFast``.  ``family(name, chat=...)`` trains once per
process and returns a fresh wrapper, so tests may set attributes on it freely.
"""

from __future__ import annotations

import functools
import random

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

# GPT-4 / Llama 3 / Qwen split pattern: a word keeps one leading non-letter (usually a space).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Chat templates of the families' styles; each wraps one user message and adds the generation prompt.
PLAIN_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] | capitalize }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
TINY_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
LLAMA3_TEMPLATE = (  # the real one trims the message: its first word loses its leading space
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
LLAMA2_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] | trim }} [/INST]"
    "{% else %} {{ m['content'] | trim }} {{ eos_token }}{% endif %}{% endfor %}"
)
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
BERT_TEMPLATE = "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} [SEP] {% endfor %}assistant :"


def english_lines(n_lines: int = 3000, seed: int = 0, n_words: int = 2500) -> list[str]:
    """Pseudo-English: syllable words with a Zipf-like frequency, some capitalised, some punctuation."""
    rng = random.Random(seed)
    onsets = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
              "st", "tr", "pl", "gr", "ch", "sh", "th", "br"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
    codas = ["", "", "n", "r", "s", "t", "l", "nd", "st", "ck"]
    words = sorted({"".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                            for _ in range(rng.randint(1, 3))) for _ in range(n_words)})
    weights = [1.0 / (i + 1) ** 0.9 for i in range(len(words))]
    lines = []
    for _ in range(n_lines):
        sent = rng.choices(words, weights=weights, k=rng.randint(5, 20))
        lines.append(" ".join(sent).capitalize() + rng.choice([".", ".", "?", "!", ","]))
    return lines


def cjk_lines(n_lines: int = 3000, seed: int = 0) -> list[str]:
    """Mostly CJK text without spaces, CJK punctuation, and now and then a Latin word set off by spaces."""
    rng = random.Random(seed)
    chars = [chr(0x4E00 + rng.randrange(0x5000)) for _ in range(700)]
    words = sorted({"".join(rng.choices(chars, k=rng.randint(1, 3))) for _ in range(3000)})
    weights = [1.0 / (i + 1) ** 0.9 for i in range(len(words))]
    latin = ["data", "model", "token", "server", "cache", "batch", "query", "GPU", "text", "file"]
    lines = []
    for _ in range(n_lines):
        parts = []
        for w in rng.choices(words, weights=weights, k=rng.randint(8, 30)):
            parts.append(w)
            r = rng.random()
            if r < 0.03:
                parts.append(f" {rng.choice(latin)} ")
            elif r < 0.10:
                parts.append(rng.choice("，、"))
        lines.append("".join(parts) + "。")
    return lines


def _byte_tokens() -> list[str]:
    return [f"<0x{b:02X}>" for b in range(256)]


def _with_byte_fallback(trained: Tokenizer, specials: list[str]) -> models.BPE:
    """A SentencePiece-style BPE: the specials, then the 256 byte pieces, then the trained pieces."""
    vocab = {t: i for i, t in enumerate(specials + _byte_tokens())}
    for t, _ in sorted(trained.get_vocab().items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    return models.BPE(vocab=vocab, merges=_merges(trained), unk_token=specials[0], byte_fallback=True, fuse_unk=True)


def _merges(trained: Tokenizer) -> list[tuple[str, str]]:
    import json

    raw = json.loads(trained.to_str())["model"]["merges"]
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in raw]


def _bpe(lines, vocab_size, specials, pre_tokenizer, alphabet=(), normalizer=None) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=list(alphabet), show_progress=False))
    return tok


def _unigram(lines, vocab_size, specials, pre_tokenizer) -> Tokenizer:
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizer
    tok.train_from_iterator(lines, trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=specials, unk_token=specials[-1], show_progress=False))
    return tok


def _template(tok: Tokenizer, bos: str | None = None, eos: str | None = None) -> None:
    """The post-processor: the family's BOS before and/or EOS after the text (none: no special tokens)."""
    single = " ".join(x for x in (bos, "$A", eos) if x)
    pair = " ".join(x for x in (bos, "$A", eos, "$B:1", eos) if x)
    tok.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(t, tok.token_to_id(t)) for t in (bos, eos) if t])


def _space_metaspace(prepend: str, split: bool = True):
    return pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend, split=split)


def _sp_decoder(strip_dummy: bool):
    """SentencePiece's legacy decoder chain (Llama 2 / Gemma): ▁ to space, bytes, and the dummy space off."""
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if strip_dummy:
        steps.append(decoders.Strip(" ", 1, 0))
    return decoders.Sequence(steps)


def _gpt2() -> tuple[Tokenizer, dict]:
    tok = _bpe(english_lines(), 2000, ["<|endoftext|>"], pre_tokenizers.ByteLevel(add_prefix_space=False),
               pre_tokenizers.ByteLevel.alphabet())
    tok.decoder = decoders.ByteLevel()
    return tok, {"eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "chat_template": PLAIN_TEMPLATE}


def _llama3() -> tuple[Tokenizer, dict]:
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PATTERN), "isolated"),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = _bpe(english_lines(seed=1), 2500, specials, pre, pre_tokenizers.ByteLevel.alphabet())
    tok.decoder = decoders.ByteLevel()
    _template(tok, bos="<|begin_of_text|>")
    return tok, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": LLAMA3_TEMPLATE}


def _sp_bpe(lines, vocab_size, specials) -> Tokenizer:
    """A SentencePiece BPE with byte fallback, trained word by word (pieces never span a space)."""
    trained = _bpe(lines, vocab_size, [], _space_metaspace("always"))
    return Tokenizer(_with_byte_fallback(trained, specials))


def _llama2() -> tuple[Tokenizer, dict]:
    """Llama 2's legacy tokenizer.json: the dummy prefix in the normalizer, no pre-tokenizer."""
    tok = _sp_bpe(english_lines(seed=2), 2000, ["<unk>", "<s>", "</s>"])
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = _sp_decoder(strip_dummy=True)
    _template(tok, bos="<s>")
    return tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "chat_template": LLAMA2_TEMPLATE}


def _mistral() -> tuple[Tokenizer, dict]:
    """Newer Llama/Mistral conversions: Metaspace with the dummy prefix on the first section only."""
    tok = _sp_bpe(english_lines(seed=3), 2000, ["<unk>", "<s>", "</s>"])
    tok.pre_tokenizer = _space_metaspace("first", split=False)
    tok.decoder = decoders.Sequence([decoders.ByteFallback(),
                                     decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)])
    _template(tok, bos="<s>")
    return tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "chat_template": LLAMA2_TEMPLATE}


def _gemma() -> tuple[Tokenizer, dict]:
    """Gemma: spaces become ▁ in the normalizer, no dummy prefix, BOS added."""
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    tok = _sp_bpe(english_lines(seed=4), 2000, specials)
    tok.model.unk_token = "<unk>"
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = _sp_decoder(strip_dummy=False)
    _template(tok, bos="<bos>")
    return tok, {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
                 "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"], "chat_template": GEMMA_TEMPLATE}


def _sp_nodummy() -> tuple[Tokenizer, dict]:
    """SentencePiece BPE with add_dummy_prefix=false as a Metaspace(prepend_scheme="never"); no BOS."""
    tok = _bpe(english_lines(seed=5), 2000, ["<unk>", "</s>"], _space_metaspace("never"))
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never")
    return tok, {"eos_token": "</s>", "unk_token": "<unk>", "chat_template": PLAIN_TEMPLATE}


def _t5() -> tuple[Tokenizer, dict]:
    """T5: Unigram, dummy prefix, and an EOS appended after the text."""
    tok = _unigram(english_lines(seed=6), 2000, ["<pad>", "</s>", "<unk>"], _space_metaspace("always"))
    tok.normalizer = normalizers.NFKC()
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    _template(tok, eos="</s>")
    return tok, {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>", "chat_template": PLAIN_TEMPLATE}


def _unigram_nodummy() -> tuple[Tokenizer, dict]:
    """Unigram without a dummy prefix (Gemma-like spacing), BOS added."""
    specials = ["<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<unk>"]
    tok = _unigram(english_lines(seed=7), 2000, specials, _space_metaspace("never"))
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="never")
    _template(tok, bos="<bos>")
    return tok, {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
                 "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"], "chat_template": GEMMA_TEMPLATE}


def _bert() -> tuple[Tokenizer, dict]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(english_lines(seed=8), trainers.WordPieceTrainer(
        vocab_size=2000, special_tokens=specials, show_progress=False))
    tok.decoder = decoders.WordPiece()
    _template(tok, bos="[CLS]", eos="[SEP]")
    return tok, {"unk_token": "[UNK]", "sep_token": "[SEP]", "cls_token": "[CLS]", "pad_token": "[PAD]",
                 "mask_token": "[MASK]", "chat_template": BERT_TEMPLATE}


def _cjk() -> tuple[Tokenizer, dict]:
    """Qwen-style byte-level BPE trained on CJK text: few words start with a space."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PATTERN), "isolated"),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = _bpe(cjk_lines(), 3000, specials, pre, pre_tokenizers.ByteLevel.alphabet())
    tok.decoder = decoders.ByteLevel()
    return tok, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": CHATML_TEMPLATE}


def _cjk_sp() -> tuple[Tokenizer, dict]:
    """A SentencePiece BPE (ChatGLM/Baichuan-like) trained on CJK text, dummy prefix, BOS."""
    tok = _sp_bpe(cjk_lines(seed=1), 3000, ["<unk>", "<s>", "</s>"])
    tok.pre_tokenizer = _space_metaspace("always")
    tok.decoder = decoders.Sequence([decoders.ByteFallback(),
                                     decoders.Metaspace(replacement="▁", prepend_scheme="always")])
    _template(tok, bos="<s>")
    return tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "chat_template": LLAMA2_TEMPLATE}


def _small_bpe() -> tuple[Tokenizer, dict]:
    """Byte-level BPE with 300 tokens: the 256 bytes and a few dozen merges."""
    tok = _bpe(english_lines(seed=9), 300, ["<|endoftext|>"], pre_tokenizers.ByteLevel(add_prefix_space=False),
               pre_tokenizers.ByteLevel.alphabet())
    tok.decoder = decoders.ByteLevel()
    return tok, {"eos_token": "<|endoftext|>", "chat_template": TINY_TEMPLATE,
                 "additional_special_tokens": ["<|user|>", "<|assistant|>", "<|end|>"]}


def _small_sp() -> tuple[Tokenizer, dict]:
    """SentencePiece BPE with a dummy prefix and 120 pieces in all (letters and a few merges)."""
    tok = _bpe(english_lines(seed=10), 120, ["<unk>", "<s>", "</s>"], _space_metaspace("always"))
    tok.model.unk_token = "<unk>"
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    _template(tok, bos="<s>")
    return tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "chat_template": LLAMA2_TEMPLATE}


def _small_wordpiece() -> tuple[Tokenizer, dict]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(english_lines(seed=11), trainers.WordPieceTrainer(
        vocab_size=150, special_tokens=specials, show_progress=False))
    tok.decoder = decoders.WordPiece()
    _template(tok, bos="[CLS]", eos="[SEP]")
    return tok, {"unk_token": "[UNK]", "sep_token": "[SEP]", "cls_token": "[CLS]", "pad_token": "[PAD]",
                 "chat_template": BERT_TEMPLATE}


def _chars() -> tuple[Tokenizer, dict]:
    """Character level (no merges, no pre-tokenizer): no token carries a space, any run of them round-trips."""
    chars = sorted(set("".join(english_lines(200, seed=12))))
    tok = Tokenizer(models.BPE(vocab={"<unk>": 0, **{c: i + 1 for i, c in enumerate(chars)}}, merges=[],
                               unk_token="<unk>"))
    tok.decoder = decoders.Fuse()
    return tok, {"unk_token": "<unk>", "chat_template": PLAIN_TEMPLATE}


def _all_special() -> tuple[Tokenizer, dict]:
    """Every token is special: nothing ordinary to build a prompt from."""
    words = ["<a>", "<b>", "<c>", "<d>"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<a>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(words)
    return tok, {"unk_token": "<a>", "additional_special_tokens": words[1:]}


def _merging() -> tuple[Tokenizer, dict]:
    """No pre-tokenizer and the merge a+a: ``a`` next to ``a`` becomes ``aa``, so only ``aa`` repeats
    itself, and a prompt made only of ``aa`` would be the same for every request."""
    tok = Tokenizer(models.BPE(vocab={"<unk>": 0, "a": 1, "aa": 2}, merges=[("a", "a")], unk_token="<unk>"))
    return tok, {"unk_token": "<unk>"}


BUILDERS = {
    "gpt2": _gpt2, "llama3": _llama3, "llama2": _llama2, "mistral": _mistral, "gemma": _gemma,
    "sp_nodummy": _sp_nodummy, "t5": _t5, "unigram_nodummy": _unigram_nodummy, "bert": _bert,
    "cjk": _cjk, "cjk_sp": _cjk_sp, "small_bpe": _small_bpe, "small_sp": _small_sp,
    "small_wordpiece": _small_wordpiece, "chars": _chars,
}
IMPOSSIBLE = {"all_special": _all_special, "merging": _merging}
FAMILIES = sorted(BUILDERS)


@functools.cache
def _trained(name: str) -> tuple[str, dict]:
    """The trained tokenizer (as its JSON) and the wrapper's settings; trained once per version of
    this file and of ``tokenizers``, kept in tokenfactory's cache (training the 17 costs 7 s CPU).
    t5, unigram_nodummy, bert and small_wordpiece train differently from one training to the next
    (the trainers' threads): a cache holds one of them, and clearing it draws another."""
    import hashlib
    import json
    import os
    from importlib.metadata import version
    from pathlib import Path

    from engines.tiny_model import cache_root

    key = hashlib.sha256(Path(__file__).read_bytes() + version("tokenizers").encode()).hexdigest()[:12]
    kept = cache_root() / "tokenizer-families" / key / f"{name}.json"
    if kept.exists():
        doc = json.loads(kept.read_text())
        return doc["tokenizer"], doc["settings"]
    tok, kw = {**BUILDERS, **IMPOSSIBLE}[name]()
    kept.parent.mkdir(parents=True, exist_ok=True)
    staged = kept.with_name(f"{kept.name}.{os.getpid()}")
    staged.write_text(json.dumps({"tokenizer": tok.to_str(), "settings": kw}))
    os.replace(staged, kept)  # whole or absent: another process may be reading it
    return tok.to_str(), kw


def family(name: str, chat: bool = False):
    """A fresh ``PreTrainedTokenizerFast`` of family ``name``; its chat template is set only when ``chat``."""
    from transformers import PreTrainedTokenizerFast

    raw, kw = _trained(name)
    kw = dict(kw)
    template = kw.pop("chat_template", None)
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(raw), name_or_path=f"trained/{name}", **kw)
    if chat:
        tok.chat_template = template or PLAIN_TEMPLATE
    return tok
