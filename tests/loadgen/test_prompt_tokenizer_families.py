"""Exact prompts under every tokenizer family, each trained here (``tests/tokenizer_families``).

The server is played by the tokenizer itself: ``tok(text)`` for /v1/completions (special
tokens added) and ``apply_chat_template(..., tokenize=True)`` for chat.
"""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.workloads.prompts import PromptBuilder, load_tokenizer
from tests.tokenizer_families import FAMILIES, IMPOSSIBLE, family

LENGTHS = [1, 2, 17, 300, 2000]
# Llama 2's legacy tokenizer.json prepends the dummy "▁" in its normalizer, even before a
# space: its texts start without one, and two of them join with a space between.
JOIN_WITH_SPACE = {"llama2"}
# Byte-level or dummy-prefix-free families whose chat template trims the message: its first word
# loses its space and re-tokenises (the same way in every prompt, and the count stays exact).
TRIMMED_FIRST_WORD = {"llama3", "gemma", "unigram_nodummy"}


def server_ids(tok, prompt) -> list[int]:
    if isinstance(prompt, list):
        ids = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    return tok(prompt, add_special_tokens=True)["input_ids"]


@pytest.mark.parametrize("chat", [False, True], ids=["completion", "chat"])
@pytest.mark.parametrize("name", FAMILIES)
def test_family_prompts_are_exact(name, chat):
    tok = family(name, chat=chat)
    b = PromptBuilder(tok, seed=7, chat=chat)
    assert len(b.pool) >= 2 and len(set(b.pool.tolist())) == len(b.pool)

    for n in sorted({*LENGTHS, b.overhead + 1, b.overhead + 2}):
        if n - b.overhead < 1:
            with pytest.raises(ValueError, match=rf"input_tokens={n} is below .*trained/{name}"):
                b.prompt(n)
            continue
        p = b.prompt(n)
        assert isinstance(p, list) == chat
        assert len(server_ids(tok, p)) == n, (name, chat, n)
        assert (b.count_messages(p) if chat else b.count(p)) == n

    # Two prompts with the same shared prefix: the same leading tokens, which are the prefix's ids.
    prefix = b.random_ids(40)
    a, c = (server_ids(tok, b.prompt(n, prefix_ids=prefix)) for n in (b.overhead + 60, b.overhead + 90))
    assert len(a) == b.overhead + 60 and len(c) == b.overhead + 90
    skip = int(chat and name in TRIMMED_FIRST_WORD)
    head = next(i for i in range(len(a)) if a[i + 1:i + 40] == prefix[1:].tolist())
    assert a[:head + 40] == c[:head + 40]
    assert a[head + skip:head + 40] == prefix[skip:].tolist()

    if not chat:
        # Texts of the builder, alone and joined, count as their tokens (plus BOS/EOS once).
        t1, t2 = b.text_of(50), b.text_of(70, prefix_ids=prefix)
        assert b.count(t1) == 50 + b.overhead
        assert b.joiner == (" " if name in JOIN_WITH_SPACE else "")
        assert len(server_ids(tok, t1 + b.joiner + t2)) == 120 + b.overhead
        assert b.count(t1 + b.joiner + t2) == 120 + b.overhead


@pytest.mark.parametrize("name", FAMILIES)
def test_builder_counts_like_the_tokenizer(name):
    """``count`` may take the Rust tokenizer's fast path; it must agree with the wrapper on any text."""
    tok = family(name, chat=True)
    b = PromptBuilder(tok, chat=True)
    for text in ["", "Hello, World!  two  spaces\n\nnew line", "数据的模型 data。", " leading", b.text_of(30)]:
        assert b.count(text) == len(tok(text)["input_ids"])
        msgs = [{"role": "user", "content": text}]
        assert b.count_messages(msgs) == len(server_ids(tok, msgs))


def test_builder_is_deterministic_and_pool_independent_of_seed():
    tok = family("mistral")
    b1, b2, b3 = PromptBuilder(tok, seed=1), PromptBuilder(tok, seed=1), PromptBuilder(tok, seed=2)
    assert np.array_equal(b1.pool, b3.pool)
    assert b1.prompt(200) == b2.prompt(200) != b3.prompt(200)


@pytest.mark.parametrize("chat", [False, True], ids=["completion", "chat"])
@pytest.mark.parametrize("name", sorted(IMPOSSIBLE))
def test_impossible_tokenizer_is_one_clear_error(name, chat):
    tok = family(name, chat=chat)
    with pytest.raises(ValueError, match=rf"tokenizer 'trained/{name}' cannot give prompts of an exact token count"):
        PromptBuilder(tok, chat=chat)


def test_chat_without_template_is_one_clear_error():
    with pytest.raises(ValueError, match=r"tokenizer 'trained/gpt2' .*chat template"):
        PromptBuilder(family("gpt2", chat=False), chat=True)


def test_prefix_longer_than_prompt_is_one_clear_error():
    b = PromptBuilder(family("gpt2"))
    with pytest.raises(ValueError, match="shared prefix of 30 tokens does not fit in a prompt of 20"):
        b.prompt(20, prefix_ids=b.random_ids(30))


def test_saved_tokenizer_loads_and_gives_exact_prompts(tmp_path):
    """The AutoTokenizer path the harness uses: a family saved to a folder and loaded back."""
    family("llama2", chat=True).save_pretrained(tmp_path)
    tok = load_tokenizer(str(tmp_path))
    for chat in (False, True):
        b = PromptBuilder(tok, seed=3, chat=chat)
        for n in (b.overhead + 1, 500):
            assert len(server_ids(tok, b.prompt(n))) == n


def test_a_draw_that_does_not_round_trip_is_drawn_again():
    """A token that does not round-trip in the pool (as if selection had missed it: a lone byte of
    a multi-byte character); the builder notices by encoding and draws again, so prompts stay exact."""
    tok = family("gpt2")
    b = PromptBuilder(tok, seed=5)
    byte = next(i for i in range(len(tok)) if tok.decode([i]) == "\ufffd")
    b.pool = np.append(b.pool, byte)  # about 1 prompt of 300 tokens in 3 draws it
    encodes = []
    encode = b._encode_in_context
    b._encode_in_context = lambda texts, mode: encodes.append(1) or encode(texts, mode)
    for _ in range(40):
        assert len(server_ids(tok, b.prompt(300))) == 300
    assert len(encodes) > 45


class _NoRustBackend:
    """A tokenizer seen only through the transformers API (as a slow, Python tokenizer is)."""

    def __init__(self, tok):
        self._tok = tok

    def __getattr__(self, name):
        if name == "backend_tokenizer":
            raise AttributeError(name)
        return getattr(self._tok, name)

    def __call__(self, *args, **kwargs):
        return self._tok(*args, **kwargs)


@pytest.mark.parametrize("chat", [False, True], ids=["completion", "chat"])
def test_tokenizer_without_rust_backend(chat):
    tok = family("t5", chat=True)
    b = PromptBuilder(_NoRustBackend(tok), seed=2, chat=chat)
    assert b._codec.fast is None
    assert np.array_equal(b.pool, PromptBuilder(tok, chat=chat).pool)
    for n in (b.overhead + 1, 777):
        assert len(server_ids(tok, b.prompt(n))) == n
