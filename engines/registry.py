"""engine=NAME -> adapter class."""

from __future__ import annotations

from engines.base import EngineAdapter, EngineError
from engines.dynamo import Dynamo
from engines.openai_compat import OpenAICompatible
from engines.sglang import SGLang
from engines.transformers_serve import TransformersServe
from engines.vllm import VLLM

ADAPTERS: dict[str, type[EngineAdapter]] = {
    "transformers": TransformersServe,
    "openai": OpenAICompatible,
    "vllm": VLLM,
    "sglang": SGLang,
    "dynamo": Dynamo,
}


def make_engine(cfg, run_dir) -> EngineAdapter:
    name = cfg.get("name")
    cls = ADAPTERS.get(name)
    if cls is None:
        raise EngineError(f"engine.name={name!r} is not a known engine (known: {', '.join(sorted(ADAPTERS))})")
    return cls(cfg, run_dir)
