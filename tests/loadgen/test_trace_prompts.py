"""Prompts of trace rows under the tiny model's real tokenizer: exact lengths, and shared
prefixes exactly where the trace says."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from loadgen.workloads.prompts import PromptBuilder, load_tokenizer
from loadgen.workloads.synthetic import synthetic_blocks, synthetic_items
from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.prompts import TracePrompts, fit_lengths


@pytest.fixture(scope="module")
def tok():
    from engines.tiny_model import ensure_tiny_model

    return load_tokenizer(str(ensure_tiny_model()))


def ids(tok, text):
    return tok(text, add_special_tokens=True)["input_ids"]


def common(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def mooncake_table(rows):
    offs = np.cumsum([0] + [len(h) for _, _, h in rows])
    return WorkloadTable(arrival_s=np.arange(len(rows), dtype=float), input_tokens=np.array([r[0] for r in rows]),
                         output_tokens=np.array([r[1] for r in rows]), source="mooncake",
                         hash_offsets=offs.astype(np.int64),
                         hash_values=np.array([x for _, _, h in rows for x in h], dtype=np.int64))


def test_mooncake_prefix_identity_through_tokenizer(tok):
    t = mooncake_table([(1024, 8, [0, 1]), (1100, 8, [0, 1, 2]), (600, 8, [3, 4]), (700, 8, [0, 5]),
                        (1500, 8, [0, 1, 6])])
    b = PromptBuilder(tok, seed=3)
    tp = TracePrompts(t, b, seed=0, max_model_len=2048)
    enc = []
    for i in range(len(t)):
        prompt, n = tp.single(i)
        e = ids(tok, prompt)
        assert len(e) == n == t.input_tokens[i]  # exact length under the real tokenizer
        enc.append(e)
    o = b.overhead
    assert common(enc[0], enc[1]) == 1024  # A is entirely a prefix of B (two shared blocks, A's 2nd partial)
    assert common(enc[1], enc[4]) == o + 2 * 512  # two full shared blocks, then block 2 vs 6
    assert common(enc[0], enc[3]) == o + 512  # one shared block
    assert common(enc[0], enc[2]) == o  # no shared block: only the BOS
    # The same block gives the same ids in another builder and run (deterministic per block id).
    again = TracePrompts(t, PromptBuilder(tok, seed=99), seed=0, max_model_len=2048).single(3)[0]
    assert common(ids(tok, again), enc[3]) >= o + 512


def test_chat_prompts_exact(tok):
    t = mooncake_table([(900, 8, [0, 1]), (700, 8, [0, 7])])
    b = PromptBuilder(tok, seed=1, chat=True)
    tp = TracePrompts(t, b)
    (m0, n0), (m1, n1) = tp.single(0), tp.single(1)
    assert b.count_messages(m0) == n0 == 900 and b.count_messages(m1) == n1 == 700
    e0 = tok.apply_chat_template(m0, add_generation_prompt=True, tokenize=True)
    e1 = tok.apply_chat_template(m1, add_generation_prompt=True, tokenize=True)
    e0 = e0["input_ids"] if hasattr(e0, "keys") else e0
    e1 = e1["input_ids"] if hasattr(e1, "keys") else e1
    assert common(e0, e1) >= 512  # template header + one shared block


def test_prefix_groups_synthetic(tok):
    cfg = OmegaConf.create({"input_tokens": 120, "output_tokens": 4, "seed": 5,
                            "input_dist": {"kind": "uniform", "min": 80, "max": 160},
                            "prefix_groups": {"count": 3, "prefix_tokens": 64, "popularity": "zipf", "zipf_s": 1.0}})
    b = PromptBuilder(tok, seed=0)
    groups = np.concatenate([g for _, _, _, g in synthetic_blocks(cfg, 30)])
    items = list(synthetic_items(cfg, b, 30))
    enc = [ids(tok, it.prompt) for it in items]
    for it, e in zip(items, enc):
        assert len(e) == it.prompt_tokens
    assert [it.prefix_group for it in items] == groups.tolist()  # the row's prefix_group (per-group hit rate)
    assert {it.prefix_group for it in synthetic_items(OmegaConf.merge(cfg, {"prefix_groups": {"count": 0}}), b, 5)} \
        == {None}
    for i in range(30):
        for j in range(i + 1, 30):
            c = common(enc[i], enc[j])
            if groups[i] == groups[j]:
                assert c >= b.overhead + 64
            else:
                assert c < b.overhead + 64
    # Zipf popularity: P(g) = (1/(g+1)) / H_3
    big = np.concatenate([g for _, _, _, g in synthetic_blocks(cfg, 20000)])
    share = np.bincount(big, minlength=3) / big.size
    np.testing.assert_allclose(share, np.array([1, 1 / 2, 1 / 3]) / (1 + 1 / 2 + 1 / 3), atol=0.015)
    # without groups: the same lengths (group draws do not disturb the length draws)
    plain = OmegaConf.merge(cfg, {"prefix_groups": {"count": 0}})
    a = np.concatenate([x for _, x, _, _ in synthetic_blocks(plain, 50)])
    c = np.concatenate([x for _, x, _, _ in synthetic_blocks(cfg, 50)])
    assert (np.maximum(a, 65) == c).all()


def test_fit_lengths_policies():
    t = WorkloadTable(arrival_s=np.arange(3.0), input_tokens=np.array([100, 3000, 1900]),
                      output_tokens=np.array([10, 50, 300]), source="azure", path="x.csv", line=np.array([2, 3, 4]))
    with pytest.raises(ValueError) as e:
        fit_lengths(t, 2048, "error")
    assert "2 of 3 requests" in str(e.value) and "x.csv:3" in str(e.value) and "3000 + 50" in str(e.value)
    s = fit_lengths(t, 2048, "skip")
    assert s.input_tokens.tolist() == [100] and "skipped" in s.notes[0]
    c = fit_lengths(t, 2048, "clip")
    assert (c.input_tokens + c.output_tokens <= 2048).all()
    assert c.input_tokens.tolist() == [100, 1998, 1748] and c.output_tokens.tolist() == [10, 50, 300]


def test_text_rows_clip_and_error(tok):
    long_text = " hello" * 3000
    t = WorkloadTable(arrival_s=np.array([0.0]), input_tokens=np.array([-1]), output_tokens=np.array([20]),
                      text=[long_text], source="jsonl", path="t.jsonl", line=np.array([1]))
    b = PromptBuilder(tok, seed=0)
    with pytest.raises(ValueError, match="t.jsonl:1: the text is"):
        TracePrompts(t, b, max_model_len=2048, on_too_long="error").single(0)
    p, n = TracePrompts(t, b, max_model_len=2048, on_too_long="clip").single(0)
    assert len(ids(tok, p)) == n and n + 20 <= 2048 and n > 1900
    assert TracePrompts(t, b, max_model_len=2048, on_too_long="skip").single(0) is None


def test_session_turn_drops_oldest_history_to_fit(tok):
    t = WorkloadTable(arrival_s=np.array([0.0, np.nan]), input_tokens=np.array([50, 120]),
                      output_tokens=np.array([10, 10]), session=np.array([0, 0]),
                      turn=np.array([0, 1], dtype=np.int32))
    b = PromptBuilder(tok, seed=0)
    old = (b.text_of(60), b.text_of(30))
    recent = (b.text_of(40), b.text_of(20))
    # all of it: 90 + 60 history tokens + >= 1 new + 10 output > 150
    prompt, n, _ = TracePrompts(t, b, max_model_len=150).turn(1, [old, recent])
    assert n == b.count(prompt) and n + 10 <= 150
    assert old[0] not in prompt and prompt.startswith(recent[0] + recent[1])
    assert n == 120  # without the oldest turn the history fits in the trace's 120 tokens again
    # with room for everything, the whole history is kept (the prompt then exceeds the trace's 120)
    prompt, n, _ = TracePrompts(t, b, max_model_len=2048).turn(1, [old, recent])
    assert prompt.startswith(old[0] + old[1] + recent[0] + recent[1]) and n == b.count(prompt) == b.overhead + 150 + 1
