"""Token-exact prompts under the tiny model's real tokenizer, and length distributions."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from conf.schema import LengthDist
from engines.tiny_model import ensure_tiny_model
from loadgen.workloads.prompts import PromptBuilder, load_tokenizer
from loadgen.workloads.synthetic import sample_lengths, synthetic_items


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(str(ensure_tiny_model()))


@pytest.mark.parametrize("n", [1, 2, 17, 128, 1500])
def test_completion_prompts_have_exact_length(tok, n):
    b = PromptBuilder(tok, seed=n)
    text = b.prompt(n)
    assert len(tok(text)["input_ids"]) == n


@pytest.mark.parametrize("n", [20, 64, 300])
def test_chat_prompts_have_exact_length_with_template(tok, n):
    b = PromptBuilder(tok, seed=1, chat=True)
    msgs = b.prompt(n)
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert len(ids) == n


def test_chat_prompt_shorter_than_template_is_an_error(tok):
    b = PromptBuilder(tok, chat=True)
    with pytest.raises(ValueError, match="input_tokens=2"):
        b.prompt(2)


def test_shared_prefix_is_token_identical(tok):
    b = PromptBuilder(tok, seed=3)
    prefix = b.random_ids(50)
    a, c = b.text_of(80, prefix), b.text_of(90, prefix)
    ia, ic = tok(a)["input_ids"], tok(c)["input_ids"]
    assert ia[:50] == ic[:50] == prefix.tolist() and len(ia) == 80 and len(ic) == 90


def test_length_distributions():
    rng = np.random.default_rng(0)
    assert (sample_lengths(rng, 100, LengthDist(kind="fixed"), 5, "x") == 100).all()
    u = sample_lengths(rng, 0, LengthDist(kind="uniform", min=10, max=20), 5000, "x")
    assert u.min() == 10 and u.max() == 20
    nrm = sample_lengths(rng, 200, LengthDist(kind="normal", std=20, min=150, max=250), 20000, "x")
    assert nrm.mean() == pytest.approx(200, rel=0.01) and nrm.min() >= 150 and nrm.max() <= 250
    ln = sample_lengths(rng, 100, LengthDist(kind="lognormal", sigma=0.5, max=400), 20000, "x")
    assert np.median(ln) == pytest.approx(100, rel=0.03) and ln.max() <= 400
    with pytest.raises(ValueError, match="workload.x.std"):
        sample_lengths(rng, 100, LengthDist(kind="normal"), 3, "x")
    with pytest.raises(ValueError, match="unknown distribution 'zipf'"):
        sample_lengths(rng, 100, LengthDist(kind="zipf"), 3, "x")


def test_synthetic_items_respect_model_limit(tok):
    cfg = OmegaConf.create({"input_tokens": 1000, "output_tokens": 100, "seed": 0})
    with pytest.raises(ValueError, match="exceeds the model's max length 1024"):
        list(synthetic_items(cfg, PromptBuilder(tok), 2, max_model_len=1024))
    items = list(synthetic_items(OmegaConf.create({"input_tokens": 30, "output_tokens": 5}), PromptBuilder(tok), 3))
    assert [i.prompt_tokens for i in items] == [30] * 3 and [i.max_tokens for i in items] == [5] * 3
