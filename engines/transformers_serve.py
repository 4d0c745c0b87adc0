"""Hugging Face ``transformers serve``: the embedded default engine.

Its OpenAI-compatible server rejects fields it does not know (HTTP 422), ``ignore_eos`` and
``min_tokens`` among them, so its dialect sends only ``max_tokens``.  The embedded tiny model
cannot generate its end-of-text token (engines/tiny_model.py), so outputs run to
``max_tokens``; with another model each row's ``finish_reason`` shows where they stopped early.
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

from engines.base import EngineAdapter, EngineError


class TransformersServe(EngineAdapter):
    name = "transformers"
    supported_features = frozenset({"continuous_batching", "attn_implementation", "compile", "quantization",
                                    "max_batch_tokens", "kv_cache_blocks", "dtype",
                                    # the shared vocabulary's names for two of them (engines/features.py)
                                    "attention_backend", "max_num_batched_tokens"})

    def features(self) -> dict:
        feats = super().features()
        feats.setdefault("continuous_batching", True)
        return feats

    def launch_command(self) -> list[str]:
        return [self.python(), "-m", "transformers.cli.transformers", "serve", str(self.model),
                "--host", self.host, "--port", str(self.port),
                "--device", self.cfg.device or "cpu", "--log-level", "info"] + self.feature_flags()

    def feature_flags(self) -> list[str]:
        f = self.features()
        argv: list[str] = []
        argv.append("--continuous-batching" if f.get("continuous_batching") else "--no-continuous-batching")
        attn = f.get("attention_backend") or f.get("attn_implementation")
        if attn:
            argv += ["--attn-implementation", str(attn)]
        if f.get("compile"):
            argv.append("--compile")
        if f.get("quantization"):
            argv += ["--quantization", str(f["quantization"])]
        batch_tokens = f.get("max_num_batched_tokens") or f.get("max_batch_tokens")  # the shared name wins
        if batch_tokens:
            argv += ["--cb-max-batch-tokens", str(batch_tokens)]
        if f.get("kv_cache_blocks"):
            argv += ["--cb-num-blocks", str(f["kv_cache_blocks"])]
        if f.get("dtype"):
            argv += ["--dtype", str(f["dtype"])]
        return argv

    def dialect(self) -> dict:
        d = super().dialect()
        for bad in ("ignore_eos", "min_tokens"):
            if bad in d["extra_body"]:
                raise EngineError(f"engine=transformers rejects the request field {bad!r} (HTTP 422); "
                                  "remove it from engine.request_extra")
        d["continuous_usage"] = False  # it has no continuous_usage_stats
        return d

    def version(self) -> str | None:
        if self.cfg.python:
            return None  # another interpreter's transformers; the log's banner has it
        try:
            return metadata.version("transformers")
        except metadata.PackageNotFoundError:
            return None

    def provenance(self) -> dict:
        p = super().provenance()
        try:
            cfg = json.loads((Path(str(self.model)) / "config.json").read_text())
            p["model_config"] = {k: cfg.get(k) for k in ("model_type", "torch_dtype", "dtype", "hidden_size",
                                                         "num_hidden_layers", "vocab_size", "max_position_embeddings")}
            tiny = Path(str(self.model)) / "tokenfactory_tiny.json"
            if tiny.exists():
                p["model_revision"] = "tokenfactory-tiny-" + json.loads(tiny.read_text())["digest"]
        except (OSError, ValueError):
            pass
        p["device"] = self.cfg.device or "cpu"
        return p
