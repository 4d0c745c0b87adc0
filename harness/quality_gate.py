"""The quality gate (step 1 of the seed's protocol): a route that can change the model's
outputs (quantised weights or KV, non-exact speculation, another model) gets a
quality-matched control before its speed counts.

- **Collect** (end of every engine session, after its load points so that cold starts and
  cache states are not disturbed): greedy outputs (``temperature`` 0, sent one at a time so
  the batch does not vary) on a fixed prompt set (``quality.prompts_path``, else built from
  ``seed`` and the served tokenizer), written to ``<session>/quality.json`` with their token
  ids; and, if ``quality.eval_command`` is set, an external evaluation against the running
  endpoint (for example ``lm_eval`` with ``--model local-completions``: README) and its score.
- **Judge** (when the experiment's record is written): each config's outputs against the
  baseline config's in the same block (``metrics.output_agreement``); the baseline against
  itself across blocks is the noise floor.  A config passes when its mean token agreement is
  at least ``quality.min_agreement`` and its evaluation score, if any, is not below the
  baseline's by more than ``quality.eval_max_drop``.  A config that fails has no good tokens
  (``harness.experiment_record`` zeroes its goodput and makes its cost per good token
  infinite in ``runs.parquet``, keeping the measured value as ``<metric>_ungated``), and the
  record and report say why.
"""

from __future__ import annotations

import asyncio
import glob
import hashlib
import json
import re
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from conf.schema import Quality, typed
from engines.dynamo import emulation_of
from harness import results_io
from metrics.quality_gate import verdicts

QUALITY_FILE = "quality.json"
def gate_enabled(cfg, design) -> bool:
    """``quality.enabled``, else the protocol's default: ``design.quality_gate`` (the caller's
    protocol design, ``protocols.designs``: the machinery imports no protocol), except on an
    emulated engine (``emulated_outputs``), whose outputs no gate can judge."""
    q = typed(cfg.quality, Quality).enabled
    if q is None:
        return design.quality_gate and not emulated_outputs(cfg)
    return bool(q)


def emulated_outputs(cfg) -> bool:
    """Whether the engine's outputs are emulated: Dynamo's mocker workers stream random token ids
    (measured: a greedy agreement of 0.001 between two launches of the same config), so an
    agreement gate would fail or pass configs by chance, and zero a failing one's goodput."""
    return bool(emulation_of(cfg.engine)["emulated"])


def prompt_set(qcfg, builder, path_base: Path | None = None) -> list:
    """The fixed prompts: ``quality.prompts_path`` (JSON lines, a ``prompt`` field: text or
    chat messages), else ``num_prompts`` prompts of ``prompt_tokens`` built from the seed."""
    q = typed(qcfg, Quality)
    if q.prompts_path:
        path = Path(q.prompts_path)
        if not path.is_absolute() and path_base is not None:
            path = path_base / path
        prompts = []
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"quality.prompts_path: cannot read {path}: {e}") from None
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{i}: not JSON ({e.msg})") from None
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), (str, list)):
                raise ValueError(f"{path}:{i}: needs a \"prompt\" field (text or chat messages)")
            prompts.append(row["prompt"])
        if not prompts:
            raise ValueError(f"{path}: no prompts")
        return prompts[: q.num_prompts] if q.num_prompts else prompts
    return [builder.prompt(q.prompt_tokens) for _ in range(q.num_prompts)]


async def _greedy(client_cfg, prompts: list, max_tokens: int) -> list:
    from loadgen.client import StreamingClient
    from loadgen.client.openai_stream import finish_text
    from loadgen.records import RequestRecord

    out = []
    async with StreamingClient(client_cfg) as client:
        for i, p in enumerate(prompts):
            now = time.perf_counter_ns()
            rec = RequestRecord(request_id=i, scheduled_ns=now, slot_ns=now, max_tokens=max_tokens)
            await client.start(rec, client.body(p, max_tokens))
            finish_text(rec)
            out.append(rec)
    return out


def _score(q: Quality, stdout: str, out_dir: Path) -> float | None:
    if q.eval_score_path:
        pattern = q.eval_score_path.replace("{out}", str(out_dir))
        # a glob: tools such as lm-eval name their results file with a timestamp; the newest wins
        found = sorted(glob.glob(pattern, recursive=True), key=lambda f: Path(f).stat().st_mtime)
        if not found:
            raise ValueError(f"quality.eval_score_path: nothing matches {pattern}")
        data = results_io.read_json(Path(found[-1]))
        for part in (q.eval_score_key or "").split("."):
            if part:
                data = data[part]
        return float(data)
    if q.eval_score_regex:
        m = re.search(q.eval_score_regex, stdout)
        return float(m.group(1)) if m else None
    return None


def run_eval(qcfg, base_url: str, model: str, tokenizer: str, out_dir: Path, env: dict | None = None) -> dict:
    """``quality.eval_command`` against the running endpoint; its score (or why there is none)."""
    q = typed(qcfg, Quality)
    fields = {"base_url": base_url, "model": model, "tokenizer": tokenizer, "out": str(out_dir),
              "conf": str(Path(__file__).resolve().parent.parent / "conf")}
    try:
        argv = [a.format(**fields) for a in q.eval_command]
    except (KeyError, IndexError, ValueError) as e:
        return {"score": None, "error": f"quality.eval_command: unknown field {e} (fields: {', '.join(fields)})"}
    cwd = q.eval_cwd.format(**fields) if q.eval_cwd else None
    eval_dir = out_dir
    eval_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=q.eval_timeout_s, env=env,
                           cwd=cwd)
    except FileNotFoundError:
        return {"score": None, "error": f"quality.eval_command: {argv[0]!r} not found"}
    except subprocess.TimeoutExpired:
        return {"score": None, "error": f"quality.eval_command timed out after {q.eval_timeout_s} s"}
    res = {"returncode": p.returncode, "seconds": round(time.monotonic() - t0, 2),
           "stdout_tail": p.stdout[-2000:], "stderr_tail": p.stderr[-2000:]}
    if p.returncode != 0:
        return {**res, "score": None, "error": f"quality.eval_command exited with {p.returncode}"}
    try:
        score = _score(q, p.stdout, eval_dir)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        return {**res, "score": None, "error": f"no score: {e}"}
    return {**res, "score": score, "error": None if score is not None else "no score found in the output"}


def collect(session, out_dir: Path) -> dict:
    """Greedy outputs of the running engine on the prompt set (and the evaluation), to
    ``out_dir/quality.json``."""
    q = typed(session.cfg.quality, Quality)
    prompts = prompt_set(q, _builder(session))
    digest = hashlib.sha256(json.dumps(prompts, sort_keys=True).encode()).hexdigest()
    # Greedy: temperature 0; tokenfactory otherwise sends no sampling fields (fixed conditions).
    client_cfg = replace(session.client_cfg, extra_body={**session.client_cfg.extra_body, "temperature": 0.0})
    t0 = time.monotonic()
    recs = asyncio.run(_greedy(client_cfg, prompts, q.max_tokens))
    outputs = []
    for r in recs:
        ids = session.tokenizer(r.text, add_special_tokens=False)["input_ids"] if r.text else []
        outputs.append({"status": r.status, "error": r.error, "text": r.text, "tokens": list(map(int, ids))})
    record = {"config": session.name or "", "block": session.block, "prompts": len(prompts),
              "prompts_sha256": digest, "max_tokens": q.max_tokens, "seconds": round(time.monotonic() - t0, 2),
              "failed": sum(o["status"] != "ok" for o in outputs), "outputs": outputs}
    if q.eval_command:
        record["eval"] = run_eval(q, session.engine.base_url, session.engine.served_model,
                                  str(session.engine.tokenizer), out_dir / "quality_eval")
    results_io.write_json(out_dir / QUALITY_FILE, record)
    ok = len(outputs) - record["failed"]
    print(f"quality: {ok}/{len(outputs)} greedy outputs on the prompt set ({record['seconds']:.1f} s)"
          + (f"; evaluation score {record['eval'].get('score')}" if "eval" in record else ""), flush=True)
    return record


def _builder(session):
    from loadgen.workloads.prompts import PromptBuilder

    # Its own seed stream: the prompt set does not share prefixes with the workload's prompts.
    return PromptBuilder(session.tokenizer, seed=int(session.cfg.seed) + 0x51A1,
                         chat=session.client_cfg.api == "chat")


def _load(folder: Path) -> dict | None:
    path = folder / QUALITY_FILE
    return results_io.read_json(path, None)


def judge(sessions: list[tuple[str, int, Path]], baseline: str, qcfg) -> dict:
    """The gate's verdict per config (``metrics.quality_gate.verdicts``) from the sessions'
    ``quality.json``.  ``sessions``: (config, block, session folder)."""
    data: dict[str, dict[int, dict]] = {}
    for name, block, folder in sessions:
        rec = _load(folder)
        if rec is not None:
            data.setdefault(name, {})[block] = rec
    q = typed(qcfg, Quality)
    return verdicts(data, baseline, min_agreement=q.min_agreement, eval_max_drop=q.eval_max_drop,
                    evaluated=bool(q.eval_command))


def format_quality(q: dict) -> str:
    lines = [f"quality gate (greedy outputs against {q['baseline'] or 'the first block'}; pass at mean token "
             f"agreement >= {q['min_agreement']:.2f}):"]
    for name, v in q["configs"].items():
        agree = v.get("mean_agreement")
        head = f"  {name or 'config'}: {'pass' if v['passed'] else 'FAIL'}"
        if agree is not None:
            head += (f", agreement {agree:.3f}, identical {v.get('identical_share', 0):.0%}, first divergence "
                     f"min {v.get('min_first_divergence')}")
        if v.get("eval_score") is not None:
            head += f", evaluation {v['eval_score']:.4g}"
        lines.append(head + ("" if v["passed"] else f": {v['reason']}: no good tokens"))
    return "\n".join(lines)
