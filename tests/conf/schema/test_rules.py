"""``conf.schema.rules.typed``: a config node as its schema's dataclass."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from conf.schema import typed
from conf.schema.engine import SharedEngine, TransformersEngine
from conf.schema.load import Load


@pytest.fixture(scope="module")
def cfg():
    with initialize_config_module("conf", version_base="1.3"):
        return compose("config", overrides=["engine=vllm", "load=constant", "load.rate=7"])


def test_a_composed_node_converts_as_a_merge_onto_its_schema_would(cfg):
    # The composed node is already of its schema: converted directly (no merge onto a fresh
    # schema, ~30x the time), to the very same dataclass a merge gives.
    slow = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SharedEngine), cfg.engine))
    assert typed(cfg.engine, SharedEngine) == slow
    assert typed(cfg.load, Load) == OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Load), cfg.load))
    assert typed(cfg.load, Load).rate == 7
    got = typed(cfg.load, Load)
    got.rate = 9  # a fresh object each time: the config is untouched
    assert cfg.load.rate == 7 and typed(cfg.load, Load).rate == 7


def test_a_plain_mapping_gets_the_defaults_and_a_node_of_another_schema_is_refused(cfg):
    assert typed({"kind": "constant", "rate": 3}, Load).rate == 3
    assert typed({"kind": "constant", "rate": 3}, Load).num_requests == Load(kind="constant").num_requests
    with pytest.raises(Exception, match="not a subclass"):
        typed(cfg.engine, TransformersEngine)
