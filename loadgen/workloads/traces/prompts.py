"""Prompts for trace rows: exact token counts and the trace's real prefix structure.

- A Mooncake row's prompt is the concatenation of its hash-id blocks: block ``h`` is always
  the same ``block_tokens`` token ids (drawn from a generator seeded by ``(seed, h)``), so
  two requests whose ``hash_ids`` share a leading run of k ids share exactly their first
  k x 512 prompt tokens, and nothing more (the next blocks are independent draws).
- A row of a prefix group starts with the group's ``prefix_tokens`` ids (seeded by the group).
- A row with text (ShareGPT, our JSON lines with ``prompt``) sends that text.
- Everything else is a fresh run of random stable tokens of the row's length.

Token counts are exact for generated prompts (``PromptBuilder`` checks each one); a prompt
never exceeds ``max_model_len`` minus the row's output tokens (see ``fit_lengths``).
"""

from __future__ import annotations

import functools
import zlib

import numpy as np

from loadgen.workloads.prompts import PromptBuilder
from loadgen.workloads.table import WorkloadTable, path_segments

TOO_LONG_POLICIES = ("error", "clip", "skip")
_GROUP_SALT = 1 << 40  # keeps group prefixes apart from Mooncake block ids
_TREE_SALT = 1 << 41   # ... and a prefix tree's segments from both


def fit_lengths(table: WorkloadTable, max_model_len: int | None, policy: str = "error") -> WorkloadTable:
    """Apply ``workload.on_too_long`` to rows whose input + output exceed ``max_model_len``:
    ``error`` (one message naming how many and the first), ``clip`` (shorten the input,
    then the output) or ``skip`` (drop them; counted in the notes)."""
    if policy not in TOO_LONG_POLICIES:
        raise ValueError(f"workload.on_too_long={policy!r}: expected one of {TOO_LONG_POLICIES}")
    if not max_model_len:
        return table
    known = table.input_tokens >= 0
    total = np.where(known, table.input_tokens, 0) + np.maximum(table.output_tokens, 0)
    over = known & (total > max_model_len)
    if not over.any():
        return table
    n_over = int(over.sum())
    if policy == "error":
        i = int(np.flatnonzero(over)[0])
        raise ValueError(
            f"{n_over} of {len(table)} requests exceed the model's max length engine.max_model_len={max_model_len} "
            f"(input + output tokens); the first, {table.where_text(i)}, has {int(table.input_tokens[i])} + "
            f"{int(table.output_tokens[i])}. Set workload.on_too_long=clip (shorten them) or skip (leave them out)")
    if policy == "skip":
        out = table.take(np.flatnonzero(~over))
        if len(out) == 0:
            raise ValueError(f"every request exceeds engine.max_model_len={max_model_len}; nothing left to replay")
        out.notes.append(f"{n_over} requests over max_model_len={max_model_len} skipped")
        return out
    out = table.take(np.arange(len(table)))
    outs = np.minimum(out.output_tokens, max_model_len // 2)
    outs = np.where(over, np.maximum(outs, 1), out.output_tokens)
    ins = np.where(over, np.minimum(out.input_tokens, max_model_len - outs), out.input_tokens)
    out.input_tokens, out.output_tokens = ins.astype(np.int64), outs.astype(np.int64)
    out.notes.append(f"{n_over} requests over max_model_len={max_model_len} clipped")
    return out


class TracePrompts:
    """Builds the prompt of row ``i`` of a table (and of session turns, given their history)."""

    def __init__(self, table: WorkloadTable, builder: PromptBuilder, seed: int = 0,
                 max_model_len: int | None = None, on_too_long: str = "error", max_output_tokens: int | None = None):
        self.table = table
        self.max_output_tokens = max_output_tokens
        self.on_too_long = on_too_long
        self.b = builder
        self.seed = int(seed)
        self.max_model_len = max_model_len
        self._block = functools.lru_cache(maxsize=4096)(self._block_ids)

    # --- token ids of shared pieces ------------------------------------------------------
    def _block_ids(self, key: int, n: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, int(key) & ((1 << 63) - 1)])
        ids = self.b.pool[rng.integers(0, len(self.b.pool), size=n)]
        ids.setflags(write=False)
        return ids

    def shared_prefix_ids(self, i: int, body_n: int) -> np.ndarray | None:
        """The ids row ``i`` shares with other rows (at most ``body_n`` of them), or None."""
        t = self.table
        if t.has_hashes:
            hs = t.hashes(i)
            if hs.size == 0:
                return None
            bt = t.block_tokens
            need = -(-body_n // bt)
            ids = np.concatenate([self._block(int(h), bt) for h in hs[:need]])
            return ids[:body_n]
        if t.prefix_group is not None and t.prefix_group[i] >= 0 and t.prefix_tokens[i] > 0:
            n = min(int(t.prefix_tokens[i]), body_n)
            return self._block(_GROUP_SALT + int(t.prefix_group[i]), int(t.prefix_tokens[i]))[:n]
        return None

    # --- single requests -----------------------------------------------------------------
    def output_tokens(self, i: int) -> int:
        n = int(self.table.output_tokens[i])
        if n < 0:  # a text trace: the reply's length under the served model's tokenizer
            n = max(len(self.b.tok(self.table.output_text[i], add_special_tokens=False)["input_ids"]), 1)
            if self.max_model_len:
                n = min(n, self.max_model_len // 2)
            if self.max_output_tokens:
                n = min(n, int(self.max_output_tokens))
        return n

    def user_text(self, i: int, n_tokens: int | None = None) -> str:
        """The user's message of row ``i``: the trace's text, or ``n_tokens`` random stable tokens."""
        t = self.table
        if t.text is not None and t.text[i] is not None:
            return t.text[i]
        return self.b.text_of(max(int(n_tokens if n_tokens is not None else t.input_tokens[i]), 1))

    def single(self, i: int):
        """(prompt, prompt_tokens) of row ``i`` sent on its own (or as a session's first turn);
        None when the row is a text over the model's limit and ``on_too_long=skip``."""
        t = self.table
        if t.text is not None and t.text[i] is not None:
            return self._fit_text(i, t.text[i])
        n = int(t.input_tokens[i])
        body = n - self.b.overhead
        if body < 1:
            raise ValueError(f"{t.where_text(i)}: input of {n} tokens is below the {self.b.overhead} tokens the "
                             "chat template or tokenizer adds by itself")
        return self.b.prompt(n, prefix_ids=self.shared_prefix_ids(i, body)), n

    def _fit_text(self, i: int, text: str):
        out_n = self.output_tokens(i)
        prompt, n = self._wrap([], text)
        if not self.max_model_len or n + out_n <= self.max_model_len:
            return prompt, n
        if self.on_too_long == "error":
            raise ValueError(f"{self.table.where_text(i)}: the text is {n} tokens, + {out_n} output tokens exceeds "
                             f"engine.max_model_len={self.max_model_len}. Set workload.on_too_long=clip or skip")
        if self.on_too_long == "skip":
            return None
        ids = self.b.tok(text, add_special_tokens=False)["input_ids"]
        keep = max(len(ids) - (n + out_n - self.max_model_len) - 2, 1)  # 2: re-tokenising at the cut may differ
        while True:
            prompt, n = self._wrap([], self.b.tok.decode(ids[:keep]))
            if n + out_n <= self.max_model_len or keep <= 1:
                return prompt, n
            keep -= max((n + out_n - self.max_model_len), 1)

    # --- task calls ------------------------------------------------------------------------
    def tree_prefix_ids(self, path: str) -> np.ndarray:
        """The ids of a prefix tree path: each segment's own tokens, drawn from (seed, its path)."""
        tree = self.table.prefix_tree or {}
        return np.concatenate([self._block(_TREE_SALT + zlib.crc32(seg.encode()), int(tree[seg]))
                               for seg in path_segments(path)])

    def task_call(self, i: int, prefix_path: str, context: list[tuple[str, str]]):
        """(prompt, prompt_tokens, own message) of row ``i`` as a task call: its prefix path's
        tokens, then the (message, reply) pairs of its context, then its own message (the
        trace's text, or ``input_tokens`` random stable tokens; with ``task_input=total``, what
        the prefix and context leave of ``input_tokens``).  As few of the oldest context pairs as
        the model's limit demands are dropped; ValueError when the prefix and message alone do
        not fit."""
        t = self.table
        out_n = self.output_tokens(i)
        lead = ""
        if prefix_path:
            ids = self.tree_prefix_ids(prefix_path)
            lead = self.b.text_of(len(ids), prefix_ids=ids)
        pairs = list(context)
        total = (t.text is None or t.text[i] is None) and t.task_input == "total"
        own = None if total else self.user_text(i)  # its length does not depend on the context
        built: dict[int, tuple] = {}

        def build(k: int) -> tuple:
            """The call with its oldest ``k`` pairs dropped: (prompt, tokens, own message)."""
            if k not in built:
                kept = pairs[k:]

                def compose(text):
                    if kept:
                        return [(lead + kept[0][0], kept[0][1]), *kept[1:]], text
                    return [], lead + text
                text = own
                if total:
                    hist, first = compose("")
                    used = self._count(hist, first) if (hist or first) else 0
                    text = self.user_text(i, max(int(t.input_tokens[i]) - used, 1))
                built[k] = (*self._wrap(*compose(text)), text)
            return built[k]

        def fits(k: int) -> bool:
            return not self.max_model_len or build(k)[1] + out_n <= self.max_model_len

        if fits(0):
            return build(0)
        m = len(pairs)
        if not fits(m):
            raise ValueError(f"{t.where_text(i)}: this call's prefix and message ({build(m)[1]} tokens) + {out_n} "
                             f"output tokens exceed engine.max_model_len={self.max_model_len}")
        # Like an agent with a context window, forget the oldest exchanges, as few as fit.  Counting
        # the whole prompt again after each drop is quadratic in the context (agent histories run
        # to 70k tokens): each pair is counted once, the cut estimated from those counts, and a few
        # whole-prompt counts around the estimate find it exactly (fewer tokens with more dropped).
        over = build(0)[1] + out_n - self.max_model_len
        sizes: list[int] = []  # the oldest pairs' counts, in growing batches until they cover ``over``
        while len(sizes) < m and sum(sizes) < over:
            sizes += self.b.count_texts([u + a for u, a in pairs[len(sizes):2 * len(sizes) + 8]])
        k = min(int(np.searchsorted(np.cumsum(sizes), over)) + 1, m)  # the fewest whose counts cover it
        lo, hi = 0, m  # lo: the most known not to fit; hi: the fewest known to fit
        step = 1
        if fits(k):  # gallop down to a pair count that does not fit, ...
            hi = k
            while hi - step > lo and fits(hi - step):
                hi, step = hi - step, step * 2
            lo = max(lo, hi - step)
        else:  # ... or up to one that does
            lo = k
            while lo + step < hi and not fits(lo + step):
                lo, step = lo + step, step * 2
            hi = min(hi, lo + step)
        while hi - lo > 1:  # then halve the bracket
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if fits(mid) else (mid, hi)
        return build(hi)

    # --- session turns --------------------------------------------------------------------
    def turn(self, i: int, history: list[tuple[str, str]]):
        """(prompt, prompt_tokens, user_text) of row ``i`` as a later turn of a session: the
        real previous user messages and responses, then this turn's message.  When the
        trace gives this turn's total input length, the new message fills what the history
        leaves of it; the oldest turns are dropped when the model's limit demands it."""
        t = self.table
        out_n = self.output_tokens(i)
        history = list(history)
        has_text = t.text is not None and t.text[i] is not None
        while True:
            hist_n = self._count(history, "") if history else 0
            if has_text:
                text = t.text[i]
            else:
                text = self.user_text(i, max(int(t.input_tokens[i]) - hist_n, 1))
            prompt, n = self._wrap(history, text)
            if not self.max_model_len or n + out_n <= self.max_model_len:
                return prompt, n, text
            if not history:  # the message alone is too long: workload.on_too_long decides
                fitted = self._fit_text(i, text) if has_text else None
                if fitted is None:
                    raise ValueError(f"{t.where_text(i)}: this turn does not fit engine.max_model_len")
                return fitted[0], fitted[1], text
            history.pop(0)  # like a chat client with a context window: forget the oldest turn

    def _messages(self, history, text):
        msgs = []
        for u, a in history:
            msgs += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
        return msgs + [{"role": "user", "content": text}]

    def _completion_text(self, history, text):
        return "".join(u + a for u, a in history) + text

    def _count(self, history, text) -> int:
        if self.b.chat:
            return self.b.count_messages(self._messages(history, text))
        return self.b.count(self._completion_text(history, text))

    def _wrap(self, history, text):
        if self.b.chat:
            msgs = self._messages(history, text)
            return msgs, self.b.count_messages(msgs)
        s = self._completion_text(history, text)
        return s, self.b.count(s)
