"""``quality.*``: the quality gate (greedy outputs against the baseline's; an external evaluation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from conf.schema.rules import checked


@dataclass
class Quality:
    """The quality gate (step 1 of the seed's protocol; harness/quality_gate.py, metrics/quality_gate.py): greedy
    outputs on a fixed prompt set, taken at the end of every engine session, compared with the
    baseline config's; optionally an external evaluation command's score."""

    enabled: Optional[bool] = None             # null: on for compare, ablation and tune, off for a sweep
    num_prompts: int = checked(16, ge=1, le=10000)
    prompt_tokens: int = checked(64, ge=1)
    max_tokens: int = checked(32, ge=1)
    prompts_path: Optional[str] = None         # JSON lines with a "prompt" field; default: built from seed
    min_agreement: float = checked(0.9, ge=0.0, le=1.0)  # mean token agreement with the baseline to pass
    eval_command: Optional[List[str]] = None   # argv; {base_url} {model} {tokenizer} {out} {conf} substituted
    eval_cwd: Optional[str] = None             # the command's working directory (same fields substituted)
    eval_score_path: Optional[str] = None      # JSON file (a glob: the newest match) the command writes ...
    eval_score_key: Optional[str] = None       # ... and the dotted key of its score in it
    eval_score_regex: Optional[str] = None     # or a regex whose group 1 in the command's stdout is the score
    eval_max_drop: float = checked(0.02, ge=0.0)  # pass while score >= baseline's - this (absolute)
    eval_timeout_s: float = checked(1800.0, gt=0)

