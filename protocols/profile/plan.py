"""The profile's plan: its ladders as ordinary runs, each a load point with its own fixed lengths.

- prefill ladder: each of ``protocol.prefill_lengths`` at concurrency 1, ``prefill_requests``
  requests of one output token (TTFT at concurrency 1 is that length's prefill);
- decode ladders: each of ``protocol.decode_prompt_lengths`` at each of
  ``protocol.decode_concurrency``, ``concurrency x decode_waves`` requests (the warm-up ones
  among them) of ``decode_output_tokens`` each (exact lengths where the engine takes
  ``ignore_eos``), so that a closed loop keeps that many sequences decoding together, in whole
  waves;
- mixed ladder (``protocol.mixed_concurrency`` > 0): each prefill length at that concurrency,
  ``mixed_requests`` requests whose output lengths are spread uniformly over
  ``mixed_output_tokens`` / 2 .. 3/2 of it, so that the closed loop falls out of step and each
  new request's prefill runs while the others decode (``metrics.profile.mixed_point``).

Each step is a ``RunSpec`` (``load=concurrency`` with its fixed lengths) plus the workload
lengths it runs with; pure data, so the plan prints and tests without an engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from conf.load_point import RunSpec

PREFILL, DECODE, MIXED = "prefill", "decode", "mixed"


@dataclass(frozen=True)
class Step:
    phase: str              # prefill | decode
    prompt_tokens: int
    output_tokens: int
    concurrency: int
    spec: RunSpec

    @property
    def workload(self) -> dict:
        """The synthetic workload's fields this step sets: exact lengths (a mixed step's outputs
        spread uniformly over half to one and a half of its mean), no shared prefix (a
        prefix-cache hit would shorten the prefill measured) and no long tail."""
        out = {"kind": "fixed", "min": None, "max": None}
        if self.phase == MIXED:
            out = {"kind": "uniform", "min": max(self.output_tokens // 2, 2), "max": self.output_tokens * 3 // 2}
        return {"input_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
                "input_dist": {"kind": "fixed"}, "output_dist": out,
                "prefix_groups": {"count": 0, "prefix_tokens": 0}, "stress": {"long_tail": {"fraction": 0.0}}}


def profile_steps(protocol, base_load: dict, max_model_len: int | None = None) -> list[Step]:
    """The ladders of ``protocol`` (conf/schema.py ProfileProtocol) as runs, prefill first.
    ``base_load``: the composed ``load`` (its client-side fields, such as the seed, kept);
    ``max_model_len``: the engine's context, where the config gives it (a step past it is an error
    naming the key)."""
    lengths = [int(x) for x in protocol.prefill_lengths]
    prompts = [int(x) for x in protocol.decode_prompt_lengths]
    users = [int(x) for x in protocol.decode_concurrency]
    out_tokens = int(protocol.decode_output_tokens)
    if len(set(lengths)) < 2:
        raise ValueError(f"protocol.prefill_lengths={lengths}: the prefill fit needs at least 2 distinct lengths")
    if len(prompts) * len(users) < 2:
        raise ValueError(f"protocol.decode_prompt_lengths={prompts} x protocol.decode_concurrency={users}: the "
                         "decode fit needs at least 2 runs")
    mixed_c, mixed_out = int(protocol.mixed_concurrency), int(protocol.mixed_output_tokens)
    if max_model_len:
        for key, vals, extra in (("protocol.prefill_lengths", lengths, mixed_out * 3 // 2 if mixed_c else 1),
                                 ("protocol.decode_prompt_lengths", prompts, out_tokens)):
            bad = [v for v in vals if v + extra > max_model_len]
            if bad:
                raise ValueError(f"{key}: {bad} + {extra} output token(s) exceed the engine's max length "
                                 f"{max_model_len} (engine.max_model_len)")
    warm = int(protocol.warmup_requests)
    load = {**base_load, "kind": "concurrency", "rate": None, "duration_s": None, "max_concurrency": None,
            "warmup_requests": warm}
    steps: list[Step] = []

    def add(phase: str, prompt: int, output: int, c: int, n: int, label: str, subdir: str) -> None:
        spec = RunSpec(index=len(steps), label=label, load={**load, "concurrency": c, "num_requests": n},
                       subdir=subdir, tags={"role": "point", "phase": phase})
        steps.append(Step(phase, prompt, output, c, spec))

    for L in sorted(set(lengths)):
        add(PREFILL, L, 1, 1, int(protocol.prefill_requests), f"prefill in={L}", f"prefill/in={L:05d}")
    for P in sorted(set(prompts)):
        for c in sorted(set(users)):
            # warm-up and measured requests together fill whole waves: none decodes alone at the end
            add(DECODE, P, out_tokens, c, max(c * int(protocol.decode_waves) - warm, 1), f"decode in={P} c={c}",
                f"decode/in={P:05d}-c={c:04d}")
    if mixed_c:
        for L in sorted(set(lengths)):
            add(MIXED, L, mixed_out, mixed_c, int(protocol.mixed_requests), f"mixed in={L} c={mixed_c}",
                f"mixed/in={L:05d}-c={mixed_c:04d}")
    return steps


def describe(steps: list[Step]) -> str:
    """The plan for people (``--dry-run``)."""
    return "\n".join(f"  {s.spec.label}: {s.spec.load['num_requests']} requests (+{s.spec.load['warmup_requests']} "
                     f"warm-up) of {s.prompt_tokens} in / {s.output_tokens} out at concurrency {s.concurrency}"
                     for s in steps)
