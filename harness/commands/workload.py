"""``tokenfactory workload describe workload=NAME [workload.path=FILE] [overrides]``: characterise a
workload (``harness.workload_describe.describe``), print the table and save workload.json and
workload.html.

    tokenfactory workload describe workload=azure workload.path=AzureLLMInferenceTrace_conv.csv
    tokenfactory workload describe workload=burstgpt workload.path=BurstGPT_1.csv workload.model_filter=GPT-4
    tokenfactory workload describe workload=synthetic workload.input_tokens=512 output_dir=DIR

Readers: synthetic, azure, burstgpt, mooncake, sharegpt, jsonl, aiperf, aiperf_dag, guidellm, sglang_agentic;
every workload.* key is in the configuration reference (docs/reference/configuration.md)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from harness.workload_describe import HTML_NAME, JSON_NAME, describe, summary_rows, with_nans


def main(argv: list[str]) -> int:
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if any(a in ("-h", "--help", "help") for a in argv):  # Hydra would read it as an override
        print(__doc__)
        return 0
    if not argv or argv[0] != "describe":
        print("usage: tokenfactory workload describe workload=NAME [workload.path=FILE] [overrides]", file=sys.stderr)
        return 2
    try:
        with initialize_config_module(config_module="conf", version_base="1.3"):
            cfg = compose(config_name="config", overrides=argv[1:])
    except (HydraException, OmegaConfBaseException) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = cfg.output_dir or str(Path("results") / "workloads" /
                                        f"{cfg.workload.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        stats = describe(cfg, out)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for k, v in summary_rows(with_nans(stats)):
        print(f"{k:>52}: {v}")
    print(f"written: {Path(out) / JSON_NAME}, {Path(out) / HTML_NAME}")
    return 0
