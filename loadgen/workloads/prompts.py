"""Prompts of an exact token count under the served model's tokenizer.

A prompt is a run of "stable" tokens: tokens whose text starts with a space and re-encodes
to exactly that one token, so joining them and tokenising again gives back the same ids and
the same count.  Each prompt is checked by encoding it; a tokenizer without enough stable
tokens gets an error rather than prompts of the wrong length.
"""

from __future__ import annotations

import functools
import re

import numpy as np

_WORD = re.compile(r"^ [A-Za-z]{2,12}$")


class PromptBuilder:
    def __init__(self, tokenizer, seed: int = 0, chat: bool = False):
        self.tok = tokenizer
        self.chat = chat
        self.rng = np.random.default_rng(seed)
        self.pool = self._stable_tokens()
        if len(self.pool) < 32:
            raise ValueError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has only {len(self.pool)} "
                "space-prefixed word tokens; cannot build prompts of exact length")
        self.overhead = self._template_overhead() if chat else self._special_overhead()

    def _stable_tokens(self) -> np.ndarray:
        vocab = self.tok.get_vocab()
        ids = sorted(vocab.values())
        texts = self.tok.batch_decode([[i] for i in ids])
        cand = [(i, t) for i, t in zip(ids, texts) if _WORD.match(t)]
        enc = self.tok([t for _, t in cand], add_special_tokens=False)["input_ids"]
        return np.array([i for (i, _), e in zip(cand, enc) if e == [i]], dtype=np.int64)

    def _special_overhead(self) -> int:
        # Tokens the tokenizer adds by itself (a BOS, say); the server counts them too.
        return len(self.tok(" a", add_special_tokens=True)["input_ids"]) - len(
            self.tok(" a", add_special_tokens=False)["input_ids"])

    def _template_overhead(self) -> int:
        body = self.tok.decode(self.pool[:8].tolist())
        full = self.count_messages([{"role": "user", "content": body}])
        return full - 8

    def count(self, text: str) -> int:
        return len(self.tok(text, add_special_tokens=True)["input_ids"])

    def count_messages(self, messages: list) -> int:
        ids = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return len(ids)

    def text_of(self, n_tokens: int, prefix_ids=None) -> str:
        """A text of ``n_tokens`` stable tokens (starting with ``prefix_ids`` when given)."""
        body_n = n_tokens - (len(prefix_ids) if prefix_ids is not None else 0)
        ids = self.pool[self.rng.integers(0, len(self.pool), size=max(body_n, 0))]
        if prefix_ids is not None:
            ids = np.concatenate([np.asarray(prefix_ids, dtype=np.int64), ids])
        return self.tok.decode(ids.tolist())

    def prompt(self, n_tokens: int, prefix_ids=None):
        """A prompt that the server will count as exactly ``n_tokens`` prompt tokens."""
        body = n_tokens - self.overhead
        if body < 1:
            raise ValueError(f"workload.input_tokens={n_tokens} is below the {self.overhead} tokens "
                             "the chat template or tokenizer adds by itself")
        text = self.text_of(body, prefix_ids)
        if self.chat:
            msgs = [{"role": "user", "content": text}]
            got = self.count_messages(msgs)
            if got != n_tokens:
                raise ValueError(f"prompt builder produced {got} tokens for {n_tokens} requested")
            return msgs
        got = self.count(text)
        if got != n_tokens:
            raise ValueError(f"prompt builder produced {got} tokens for {n_tokens} requested")
        return text

    def random_ids(self, n: int) -> np.ndarray:
        return self.pool[self.rng.integers(0, len(self.pool), size=n)]


@functools.lru_cache(maxsize=8)
def load_tokenizer(name_or_path: str):
    """The served model's tokenizer (local folder or a name already in the local HF cache)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name_or_path)
    except Exception as e:  # noqa: BLE001 - the user needs the path and the reason, not a traceback
        raise ValueError(f"engine.tokenizer: cannot load tokenizer {name_or_path!r}: {e}") from None
