"""Prompts of an exact token count under the served model's tokenizer.

A prompt is the text of a run of *pool* tokens: ordinary tokens that, written one after
another, tokenise back to exactly themselves, so a prompt of n pool tokens is n tokens to the
server, and prompts that start with the same pool ids share those ids.  The pool is found once
per tokenizer by round trips, not by assumptions about its family:

1. Surfaces: each token's text *inside* a sequence, decode([ref, t]) minus decode([ref]).  A
   single-token decode is not it: a SentencePiece dummy prefix (Llama 2, Mistral, T5) drops the
   first piece's space, WordPiece puts the space between words, not in them.
2. Candidates: tokens whose surface is a space and letters of any script, which starts a new
   word in every family: byte-level "Ġword" (GPT-2, Llama 3, Qwen), SentencePiece "▁word", a
   WordPiece whole word.  Where fewer than two of them survive the round trips, every printable
   token is tried instead (character-level vocabularies).
3. Lead: a text is its tokens' surfaces joined, its leading space kept, or dropped where the
   tokenizer adds one itself (a dummy prefix); whichever lets more candidates round-trip.
4. Round trips: each candidate alone, then rounds of random sequences of the survivors, dropping
   the tokens at each failing sequence's first mismatch, until a round passes.
5. Context: samples in the server's context (BOS/EOS added, or inside the chat template) give the
   overhead (tokens around the text), the lead there, and which tokens may start and end a text.
   A template that trims the message (Llama 3's, Gemma's) writes its first word without its space,
   as other tokens: the count stays exact and prompts with the same prefix still share their
   tokens, but the first of them is not ``prefix_ids[0]``.  Template text right after the message
   may merge with the last word: such words do not end a text.

Each prompt is encoded to check its count and that a shared prefix kept its ids; a draw that does
not round-trip is redrawn (or, when the shared prefix itself tokenises differently, our own part's
length adjusted) a bounded number of times.  Where no exact prompt can be made, one ValueError names
the tokenizer and why.  Encoding goes straight to the Rust tokenizer when it agrees with the
wrapper: the same ids without the offsets, about twice as fast.

For completions, texts of the builder (``text_of``) start with their space, so two joined count as
the sum, except where the tokenizer always prepends one itself (Llama 2's legacy dummy prefix):
there ``joiner`` (a space) goes between them.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter

import numpy as np

_MIN_POOL = 2        # two tokens already give 2**n different prompts of n tokens
_ROUNDS = 8          # rounds of random sequences that prune the pool
_SEQS, _SEQ_LEN = 256, 32
_SAMPLES = 256       # samples in the server's context
_TRIES = 16          # draws per prompt before giving up
_FREE = 0.99         # a position any pool token may take when this share of samples keeps it


class _Codec:
    """Batch encode/decode through the Rust tokenizer where it gives what the wrapper gives."""

    def __init__(self, tok):
        self.tok = tok
        self.fast = getattr(tok, "backend_tokenizer", None)
        self._enc = getattr(self.fast, "encode_batch_fast", None) or getattr(self.fast, "encode_batch", None)
        if self.fast is not None and not self._agrees():
            self.fast = None

    def _agrees(self) -> bool:
        text = " Hello world, the quick brown fox. 你好 123\n  x y"
        try:
            want = [self.tok(text, add_special_tokens=s)["input_ids"] for s in (True, False)]
            return want == [self.encode([text], s)[0] for s in (True, False)]
        except Exception:  # noqa: BLE001 - any failure of the fast path means: use the wrapper
            return False

    def encode(self, texts: list[str], specials: bool) -> list[list[int]]:
        if self.fast is not None:
            return [e.ids for e in self._enc(texts, add_special_tokens=specials)]
        return self.tok(texts, add_special_tokens=specials)["input_ids"]

    def decode(self, seqs: list[list[int]]) -> list[str]:
        if self.fast is not None:
            return self.fast.decode_batch(seqs, skip_special_tokens=False)
        return self.tok.batch_decode(seqs, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _first_mismatch(want: list[int], got: list[int]) -> int:
    """Index of the first difference (len of the shorter when one is a prefix of the other)."""
    m = min(len(want), len(got))
    d = np.flatnonzero(np.asarray(want[:m]) != np.asarray(got[:m]))
    return int(d[0]) if len(d) else m


def _find(seq: list[int], sub: list[int]) -> int:
    """Where ``sub`` starts in ``seq`` (searched from the left), or -1."""
    for o in range(len(seq) - len(sub) + 1):
        if seq[o:o + len(sub)] == sub:
            return o
    return -1


def _is_word(s: str) -> bool:
    return len(s) >= 2 and s[0] == " " and s[1:].isalpha()


def _is_printable(s: str) -> bool:
    return bool(s) and s.isprintable() and "\ufffd" not in s


class PromptBuilder:
    """Prompts of exact token counts for one tokenizer, for completions or (``chat``) one user message.

    ``pool``: the token ids prompts are drawn from (draw shared prefixes from it too);
    ``overhead``: the tokens the tokenizer or chat template adds around the text; ``rng``: the
    draws' generator, seeded by ``seed`` (the pool itself does not depend on it).
    """

    def __init__(self, tokenizer, seed: int = 0, chat: bool = False):
        self.tok = tokenizer
        self.chat = chat
        self.rng = np.random.default_rng(seed)
        # Draws come from the request producer and the session-turns thread (loadgen.prepare,
        # loadgen.dispatch): one generator, one at a time.
        self._rng_lock = threading.Lock()
        self.name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
        self._codec = _Codec(tokenizer)
        # Pool selection uses its own generator: the pool is the same whatever ``seed``, so
        # callers that draw shared prefixes from it agree across builders.
        sel = np.random.default_rng(0)
        self.pool, self._surf, strip, words = self._select_pool(sel)
        self._mode = self._calibrate(sel, strip, words)
        self.overhead = self._mode["overhead"]
        # How to join two of our texts so the result counts as their sum: a text that starts with
        # its space joins as is; one whose space the tokenizer adds itself (Llama 2's dummy prefix,
        # always prepended) needs a space between.
        self.joiner = " " if self._mode["strip"] else ""

    # --- errors ----------------------------------------------------------------------------
    def _error(self, why: str) -> ValueError:
        return ValueError(f"tokenizer {self.name!r} cannot give prompts of an exact token count: {why}")

    # --- pool selection --------------------------------------------------------------------
    def _select_pool(self, sel) -> tuple[np.ndarray, np.ndarray, bool, bool]:
        ids, surf = self._surfaces()
        if not len(ids):
            raise self._error("it has no ordinary tokens (every token is special or added)")
        texts, best = surf[ids], 0
        for kind in (_is_word, _is_printable):
            cand = ids[np.fromiter((kind(s) for s in texts), bool, len(ids))]
            if not len(cand):
                continue
            strip = kind is _is_word and self._strip_wins(cand, surf, sel)
            pool = cand[self._round_trips_alone(cand, surf, strip)]
            pool = self._prune(pool, surf, strip, sel)
            if len(pool) >= _MIN_POOL:
                return pool, surf, strip, kind is _is_word
            best = max(best, len(pool))
        raise self._error(
            f"only {best} of its {len(ids)} ordinary tokens tokenise back to themselves when written "
            f"one after another; prompts need at least {_MIN_POOL} such tokens to differ")

    def _surfaces(self) -> tuple[np.ndarray, np.ndarray]:
        """Ordinary token ids and every token's text inside a sequence ('' where unknown)."""
        vocab = self.tok.get_vocab()
        skip = set(self.tok.all_special_ids) | set(getattr(self.tok, "added_tokens_decoder", None) or ())
        ids = np.array(sorted(i for i in set(vocab.values()) if i not in skip), dtype=np.int64)
        surf = np.full(max(vocab.values(), default=-1) + 1, "", dtype=object)
        if not len(ids):
            return ids, surf
        head = ids[:4096]
        singles = self._codec.decode([[i] for i in head.tolist()])
        ref = next((i for i, s in zip(head.tolist(), singles) if s.strip().isalpha()), int(head[0]))
        lead = self._codec.decode([[ref]])[0]
        pairs = self._codec.decode([[ref, i] for i in ids.tolist()])
        surf[ids] = [p[len(lead):] if p.startswith(lead) else "" for p in pairs]
        return ids, surf

    def _render(self, ids, surf=None, strip: bool | None = None) -> str:
        text = "".join((self._surf if surf is None else surf)[ids].tolist())
        strip = self._mode["strip"] if strip is None else strip
        return text[1:] if strip and text[:1] == " " else text

    def _round_trips_alone(self, cand: np.ndarray, surf: np.ndarray, strip: bool) -> np.ndarray:
        texts = surf[cand].tolist()
        if strip:
            texts = [t[1:] if t[:1] == " " else t for t in texts]
        enc = self._codec.encode(texts, False)
        return np.fromiter((e == [i] for e, i in zip(enc, cand.tolist())), bool, len(cand))

    def _strip_wins(self, cand: np.ndarray, surf: np.ndarray, sel) -> bool:
        """Whether the tokenizer adds the first word's space itself: more words round-trip without it."""
        sample = sel.choice(cand, size=min(len(cand), 2000), replace=False)
        kept, stripped = (int(self._round_trips_alone(sample, surf, s).sum()) for s in (False, True))
        return stripped > kept

    def _prune(self, pool: np.ndarray, surf: np.ndarray, strip: bool, sel) -> np.ndarray:
        """Drop tokens that re-tokenise differently next to others (the two at each first mismatch)."""
        for _ in range(_ROUNDS):
            if len(pool) < _MIN_POOL:
                break
            seqs = pool[sel.integers(0, len(pool), size=(_SEQS, _SEQ_LEN))]
            enc = self._codec.encode([self._render(s, surf, strip) for s in seqs], False)
            bad = set()
            for s, e in zip(seqs.tolist(), enc):
                if e != s:
                    j = min(_first_mismatch(s, e), len(s) - 1)
                    bad.update(s[j:j + 2])
            if not bad:
                break
            pool = pool[~np.isin(pool, list(bad))]
        return pool

    # --- the server's context --------------------------------------------------------------
    def _calibrate(self, sel, strip: bool, words: bool) -> dict:
        """The overhead, lead, and first and last tokens allowed, from samples in the server's context."""
        leads = (strip, not strip) if words else (strip,)  # only words all have a space to drop
        k = min(len(self.pool), _SAMPLES)
        seqs = np.column_stack([sel.choice(self.pool, k, replace=False),
                                self.pool[sel.integers(0, len(self.pool), size=(k, 3))],
                                sel.choice(self.pool, k, replace=False)])
        modes = [m for m in (self._try_lead(seqs, s) for s in leads) if m is not None]
        if not modes:
            raise self._error("its chat template changes the tokens of every sample message" if self.chat
                              else "the special tokens it adds change the tokens of every sample text")
        # Most samples exact, then most samples whose first word at least stays one token, then the
        # smallest overhead, then a template that writes the message verbatim (no render per prompt);
        # the lead the pool was chosen with wins ties.
        return max(modes, key=lambda m: (m["exact"], m["one"], -m["overhead"], m["wrap"] is not None))

    def _try_lead(self, seqs: np.ndarray, strip: bool) -> dict | None:
        mode = {"strip": strip, "wrap": self._template_parts(strip) if self.chat else None}
        encs = self._encode_in_context([self._render(s, strip=strip) for s in seqs], mode)
        found = [_find(e, s[1:4]) for s, e in zip(seqs.tolist(), encs)]
        spans = [(o - 1, len(e) - o - 4) for e, o in zip(encs, found) if o >= 1]
        if not spans:
            return None
        head, tail = Counter(spans).most_common(1)[0][0]
        first_one = np.array([o == head + 1 for o in found])
        first_exact = first_one & np.array([len(e) > head and e[head] == s[0] for s, e in zip(seqs.tolist(), encs)])
        last_ok = np.array([o >= 1 and len(e) == o + 4 + tail and e[o + 3] == s[4]
                            for s, e, o in zip(seqs.tolist(), encs, found)])
        if not last_ok.any() or not first_one.any():
            return None
        # A template that trims the message re-tokenises its first word (without its space): then
        # the first word only keeps its usual count, the same in every prompt.
        first = first_exact if first_exact.any() else first_one
        mode.update(
            overhead=head + tail, head=head, skip_first=int(not first_exact.any()),
            exact=int((first_exact & last_ok).sum()), one=int((first_one & last_ok).sum()),
            starters=None if first.mean() >= _FREE else np.unique(seqs[first, 0]),
            enders=None if last_ok.mean() >= _FREE else np.unique(seqs[last_ok, 4]))
        return mode

    def _template_parts(self, strip: bool) -> tuple[str, str] | None:
        """(text before, text after) the message when the template writes it verbatim, else None."""
        a, b = (self._render(self.pool[i], strip=strip) for i in ([0, 1, 0], [1, 0, 1, 1]))
        ra, rb = self._apply_template(a), self._apply_template(b)
        i = ra.rfind(a)
        if i < 0 or ra[:i] + b + ra[i + len(a):] != rb:
            return None
        return ra[:i], ra[i + len(a):]

    def _apply_template(self, content: str) -> str:
        if getattr(self.tok, "chat_template", None) is None:
            raise self._error("it has no chat template (tokenizer.chat_template is not set); use the completions "
                              "API or a tokenizer with a template")
        try:
            return self.tok.apply_chat_template([{"role": "user", "content": content}],
                                                add_generation_prompt=True, tokenize=False)
        except Exception as e:  # noqa: BLE001 - the user needs the tokenizer and the reason, not a traceback
            raise self._error(f"cannot apply its chat template: {e}") from None

    def _encode_in_context(self, texts: list[str], mode: dict) -> list[list[int]]:
        if not self.chat:
            return self._codec.encode(texts, True)
        wrap = mode["wrap"]
        full = [wrap[0] + t + wrap[1] for t in texts] if wrap else [self._apply_template(t) for t in texts]
        return self._codec.encode(full, False)

    # --- counting --------------------------------------------------------------------------
    def count(self, text: str) -> int:
        """Tokens of a completion prompt as the server counts them (special tokens included)."""
        return len(self._codec.encode([text], True)[0])

    def count_texts(self, texts: list[str]) -> list[int]:
        """Tokens of each text on its own, nothing added (one batch: pieces of a prompt, to
        estimate the prompt's count without re-encoding it whole)."""
        return [len(ids) for ids in self._codec.encode(list(texts), False)]

    def count_messages(self, messages: list) -> int:
        """Tokens of a chat prompt as the server counts them (template and generation prompt included)."""
        text = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return len(self._codec.encode([text], False)[0])

    # --- drawing ---------------------------------------------------------------------------
    def _draw(self, k: int, first: bool) -> np.ndarray:
        """``k`` pool ids; ``first``: they start the text (a restricted first token, if any)."""
        m = self._mode
        with self._rng_lock:
            ids = self.pool[self.rng.integers(0, len(self.pool), size=k)]
            if k and m["enders"] is not None:
                ids[-1] = m["enders"][self.rng.integers(len(m["enders"]))]
            if k and first and m["starters"] is not None:
                ids[0] = m["starters"][self.rng.integers(len(m["starters"]))]
        return ids

    def _ids(self, body_n: int, prefix_ids) -> tuple[np.ndarray, int]:
        prefix = np.zeros(0, np.int64) if prefix_ids is None else np.asarray(prefix_ids, dtype=np.int64)
        own = self._draw(max(body_n - len(prefix), 0), first=not len(prefix))
        return np.concatenate([prefix, own]), len(prefix)

    def text_of(self, n_tokens: int, prefix_ids=None) -> str:
        """A text of ``n_tokens`` pool tokens (starting with ``prefix_ids`` when given).  Two texts
        joined with ``self.joiner`` count as the sum of their tokens."""
        return self._render(self._ids(n_tokens, prefix_ids)[0])

    def random_ids(self, n: int) -> np.ndarray:
        with self._rng_lock:
            return self.pool[self.rng.integers(0, len(self.pool), size=n)]

    # --- prompts ---------------------------------------------------------------------------
    def prompt(self, n_tokens: int, prefix_ids=None):
        """A prompt that the server will count as exactly ``n_tokens`` prompt tokens."""
        body = n_tokens - self.overhead
        if body < 1:
            raise ValueError(f"workload.input_tokens={n_tokens} is below the {self.overhead} tokens the chat "
                             f"template or tokenizer ({self.name!r}) adds by itself")
        ids, n_prefix = self._ids(body, prefix_ids)
        if n_prefix > body:
            raise ValueError(f"a shared prefix of {n_prefix} tokens does not fit in a prompt of {n_tokens} "
                             f"tokens ({self.overhead} of them added by the chat template or tokenizer {self.name!r})")
        got, last, own = -1, None, len(ids) - n_prefix
        for _ in range(_TRIES):
            text = self._render(ids)
            enc = self._encode_in_context([text], self._mode)[0]
            got, bad = len(enc), self._mismatch(ids, enc)
            if got == n_tokens and (bad < 0 or bad >= n_prefix):
                return self._wrap(text)
            if own and (bad >= n_prefix or (bad < 0 and not n_prefix) or (bad == n_prefix - 1 and bad != last)):
                pass  # a token of our own draw (or the prefix's last, once) merged with a neighbour: redraw
            elif got == n_tokens:
                # The shared prefix itself tokenises differently here (a trimmed first word, say), the
                # same way in every prompt that has it; the count is right.
                return self._wrap(text)
            else:  # ... and the count is not: make up for it with our own tokens, which round-trip
                own += n_tokens - got
                if own < 0:  # the prefix alone has become too long: keep what fits of its start
                    keep = n_prefix + own
                    n_prefix, own = (keep, 0) if keep > 0 else (0, body)
            last = bad
            ids = np.concatenate([ids[:n_prefix], self._draw(own, first=not n_prefix)])
        raise self._error(f"no prompt of exactly {n_tokens} tokens in {_TRIES} tries (the last had {got}); "
                          "its tokens re-tokenise differently next to each other"
                          + (" or to this shared prefix" if n_prefix else ""))

    def _wrap(self, text: str):
        return [{"role": "user", "content": text}] if self.chat else text

    def _mismatch(self, ids: np.ndarray, enc: list[int]) -> int:
        """First position of ``ids`` whose token the server does not see as drawn, or -1."""
        m = self._mode
        lo, skip = m["head"], m["skip_first"]
        if skip and len(ids) > 1:
            # A trimmed first word may have become more or fewer tokens than in most samples
            # (``head`` counts those beyond one): compare from the second word on.
            nxt = int(ids[1])
            lo = next((lo + j for j in range(6) if lo + j < len(enc) and enc[lo + j] == nxt), lo + 1)
        else:
            lo += skip
        got, want = enc[lo:lo + len(ids) - skip], ids[skip:].tolist()
        if got == want:
            return -1
        return _first_mismatch(want, got) + skip


@functools.lru_cache(maxsize=8)
def load_tokenizer(name_or_path: str, local_only: bool = False):
    """The served model's tokenizer (local folder or a name already in the local HF cache;
    ``local_only``: never the network, which can take a minute to fail without one)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name_or_path, local_files_only=local_only)
    except Exception as e:  # noqa: BLE001 - the user needs the path and the reason, not a traceback
        raise ValueError(f"engine.tokenizer: cannot load tokenizer {name_or_path!r}: {e}") from None
