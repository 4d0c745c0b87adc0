"""The quality gate's verdicts (``harness.quality_gate`` collects the outputs and reads them):
each config's greedy outputs against the baseline's, its evaluation score against the
baseline's, and what a failing config's figures become (no good tokens).

A config passes when its mean greedy token agreement with the baseline
(``metrics.output_agreement.set_agreement``) is at least ``min_agreement`` and, with an
external evaluation, its score is not below the baseline's by more than ``eval_max_drop``; the
baseline's other blocks against its first are the noise floor.  Pure: records in, verdicts out.
"""

from __future__ import annotations

from metrics.output_agreement import set_agreement

# Summary metrics that count good tokens: a config failing the gate has none.
GATED_ZERO = ("good_requests", "good_output_tokens", "goodput_rps", "request_goodput", "good_output_throughput",
              "slo_attainment", "good_tokens_per_joule")
GATED_INF = ("cost_per_mtok_good", "cost_per_good_request", "energy_per_good_token_j")



def verdicts(data: dict[str, dict[int, dict]], baseline: str, *, min_agreement: float, eval_max_drop: float,
             evaluated: bool) -> dict:
    """Per config: agreement with the baseline (same block where it ran, else its first), the
    evaluation score against the baseline's, and the verdict with its reason.  ``data``: config
    -> block -> that session's ``quality.json`` record; ``evaluated``: an external evaluation
    was configured (a config without a score then fails)."""
    base = data.get(baseline, {})
    out = {"baseline": baseline, "min_agreement": min_agreement,
           "eval_max_drop": eval_max_drop, "configs": {}}
    if not base:
        out["note"] = f"no quality outputs of the baseline ({baseline!r}) yet: nothing judged"
        return out
    base_scores = [r["eval"]["score"] for r in base.values() if r.get("eval", {}).get("score") is not None]
    base_score = sum(base_scores) / len(base_scores) if base_scores else None
    first = base[min(base)]
    for name, blocks in data.items():
        per_block, pairs_all = [], []
        for b, rec in sorted(blocks.items()):
            ref = first if name == baseline else base.get(b, first)
            if name == baseline and b == min(base):
                continue  # the baseline's first block is the reference itself
            if rec["prompts_sha256"] != ref["prompts_sha256"]:
                per_block.append({"block": b, "error": "a different prompt set than the baseline's"})
                continue
            # a prompt whose reference request failed says nothing about the candidate
            pairs = [(a["tokens"], c["tokens"]) for a, c in zip(ref["outputs"], rec["outputs"])
                     if a.get("status", "ok") == "ok"]
            if not pairs:
                per_block.append({"block": b, "unjudged": "every prompt-set request of the baseline failed"})
                continue
            pairs_all += pairs
            per_block.append({"block": b, **set_agreement(pairs), "failed": rec.get("failed", 0)})
        summary = set_agreement(pairs_all) if pairs_all else {"mean_agreement": None}
        scores = [r["eval"]["score"] for r in blocks.values() if r.get("eval", {}).get("score") is not None]
        score = sum(scores) / len(scores) if scores else None
        reasons = []
        agree = summary.get("mean_agreement")
        if name != baseline:
            if any("error" in pb for pb in per_block):
                reasons.append("outputs on a different prompt set than the baseline's")
            elif agree is None and any("unjudged" in pb for pb in per_block):
                reasons.append("not judged: the baseline's prompt-set requests failed")
            elif agree is None:
                reasons.append("no outputs to compare")
            elif agree < min_agreement:
                reasons.append(f"greedy token agreement with {baseline} {agree:.3f} < quality.min_agreement "
                               f"{min_agreement:.3f} (first divergence at token "
                               f"{summary.get('min_first_divergence')})")
            if any(r.get("failed") for r in blocks.values()):
                reasons.append(f"{sum(r.get('failed', 0) for r in blocks.values())} prompt-set request(s) failed")
            if evaluated:
                if score is None:
                    reasons.append("no evaluation score")
                elif base_score is not None and score < base_score - eval_max_drop:
                    reasons.append(f"evaluation score {score:.4g} < baseline's {base_score:.4g} - "
                                   f"quality.eval_max_drop {eval_max_drop:g}")
        out["configs"][name] = {
            "passed": not reasons, "reason": "; ".join(reasons) if reasons else
            ("the baseline (its other blocks against its first: the noise floor)" if name == baseline
             else "passed"),
            **{k: v for k, v in summary.items()}, "per_block": per_block,
            "eval_score": score, "baseline_eval_score": base_score}
    return out


def gate_row(row: dict, verdict: dict | None) -> dict:
    """A runs.parquet row with the gate applied: a failing config has no good tokens."""
    if verdict is None:
        return row
    row = dict(row)
    row["quality_gate_passed"] = bool(verdict["passed"])
    row["quality_agreement"] = verdict.get("mean_agreement")
    if not verdict["passed"]:
        row["quality_gate_reason"] = verdict["reason"]
        for k in GATED_ZERO + GATED_INF:
            if k in row:
                row[f"{k}_ungated"] = row[k]
                row[k] = 0.0 if k in GATED_ZERO else float("inf")
    return row


def gate_search(search: dict, verdict: dict | None) -> dict:
    """A session's ``search.json`` figures with the gate applied: no load meets "quality met
    and SLO met" for a failing config."""
    if verdict is None or verdict["passed"]:
        return search
    search = dict(search)
    for k in ("max_load_under_slo", "goodput_rps", "good_output_throughput", "good_output_tokens"):
        if k in search:
            search[f"{k}_ungated"], search[k] = search[k], 0.0
    if "cost_per_mtok_good" in search:
        search["cost_per_mtok_good_ungated"], search["cost_per_mtok_good"] = search["cost_per_mtok_good"], float("inf")
    return search
