import pytest
from omegaconf import OmegaConf

from engines.tiny_model import ensure_tiny_model
from loadgen.prompts import PromptBuilder, load_tokenizer
from loadgen.synthetic import synthetic_items


def _cfg(**over):
    return OmegaConf.create({"input_tokens": 300, "output_tokens": 8, "shared_prefix_tokens": 256, "seed": 0,
                             "input_dist": {"kind": "fixed"}, "output_dist": {"kind": "fixed"}, **over})


def test_prompts_share_an_exact_prefix_and_keep_their_length():
    tok = load_tokenizer(str(ensure_tiny_model()))
    b = PromptBuilder(tok, seed=1)
    items = list(synthetic_items(_cfg(), b, 5))
    ids = [tok(it.prompt, add_special_tokens=True)["input_ids"] for it in items]
    assert all(len(i) == 300 for i in ids)
    first = ids[0][:b.overhead + 256]
    assert all(i[:b.overhead + 256] == first for i in ids)
    # ... and only the prefix: the rest differs between requests.
    assert len({tuple(i[b.overhead + 256:]) for i in ids}) == 5


def test_prefix_longer_than_the_prompt_is_an_error():
    tok = load_tokenizer(str(ensure_tiny_model()))
    with pytest.raises(ValueError, match="shared_prefix_tokens=256 leaves no room"):
        list(synthetic_items(_cfg(input_tokens=200), PromptBuilder(tok), 1))
