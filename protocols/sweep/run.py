"""What a sweep does between its runs, in each config's engine session (a comparison's and an
ablation's configs too): ``protocol.probe`` places the load points from a probe of the
saturation, ``protocol.search=slo`` bisects for the highest load under the SLO.  Both run on
the experiment's skeleton (``protocols.experiment``); the math is ``load_search``'s.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from harness import results_io
from harness.engine_session import EngineSession
from harness.errors import UserError
from metrics.slo import slo_holds
from protocols.sweep.load_points import runs_from_points
from protocols.sweep.load_search import (
    Bisection,
    place_points,
    probe_concurrencies,
    probe_done,
    saturation,
    thin_percentile_warning,
)


def probe_load_points(exp) -> None:
    """``protocol.probe``: closed-loop runs at rising concurrency (on the baseline config, an
    engine launch of their own) find the saturation; the load points are placed from it
    (``probe.json``; a resumed experiment reuses it)."""
    p = exp.cfg.protocol
    path = exp.out / "probe.json"
    if path.exists():
        probe = results_io.read_json(path)
    else:
        name = next(iter(exp.configs), "")
        cfg = exp.configs.get(name, exp.cfg)
        base = {**OmegaConf.to_container(cfg.load, resolve=True), "kind": "concurrency", "warmup_requests": 0,
                "duration_s": None, "rate": None}
        steps: list[tuple[int, float]] = []
        session = EngineSession(cfg, exp.out / "probe", exp.mlflow, name=name or None)
        print(f"probe: closed-loop runs at rising concurrency on {name or 'the config'}", flush=True)
        try:
            session.start()
            for c in probe_concurrencies(int(p.probe_max_concurrency)):
                spec = runs_from_points({**base, "concurrency": c,
                                         "num_requests": c * int(p.probe_requests_per_user)}, [c],
                                        prefix="")[0]
                spec.subdir, spec.tags = f"c{c:04d}", {"role": "probe"}
                run = session.run_point(spec, last=False)
                steps.append((c, float(run.summary.get("request_throughput") or 0.0)))
                if probe_done(steps) or run.summary.get("completed", 0) == 0:
                    break
        finally:
            session.stop()
        sat, at, flat = saturation(steps)
        probe = {"steps": steps, "saturation_rps": sat, "saturation_concurrency": at, "flattened": flat}
        results_io.write_json(path, probe)
    closed = exp.cfg.load.kind == "concurrency"
    sat = probe["saturation_concurrency"] if closed else probe["saturation_rps"]
    points = place_points(sat, str(p.spacing), int(p.num_points), integer=closed)
    print(f"probe: saturation {probe['saturation_rps']:.3g} req/s at concurrency "
          f"{probe['saturation_concurrency']}" + ("" if probe["flattened"] else " (the curve had not flattened)")
          + f"; load points ({p.spacing}): {points}", flush=True)
    exp.plan = runs_from_points(OmegaConf.to_container(exp.cfg.load, resolve=True), points,
                                repeats=1 if exp.multi else int(p.repeats))
    for s in exp.sessions:
        s.runs = list(exp.plan)


def search_slo(exp, s, cfg: DictConfig) -> None:
    """``protocol.search=slo``: bisection over the offered load for the highest one whose run
    meets the SLO, in session ``s`` (a ``protocols.blocks.SessionPlan``: ``search.json`` in its
    folder; probes already run are reused)."""
    p = exp.cfg.protocol
    closed = cfg.load.kind == "concurrency"
    loads = [float(r.load["concurrency" if closed else "rate"]) for r in exp.plan
             if r.load.get("concurrency" if closed else "rate")]
    low = p.search_low or (min(loads) if loads else None)
    high = p.search_high or (max(loads) if loads else None)
    probe = exp.out / "probe.json"
    if (low is None or high is None) and probe.exists():
        sat = results_io.read_json(probe)["saturation_concurrency" if closed else "saturation_rps"]
        low, high = low or sat * 0.1, high or sat * 1.2
    if low is None or high is None or not low < high:
        raise UserError("protocol.search=slo needs a bracket: protocol.search_low < protocol.search_high, "
                        "load points to take it from, or protocol.probe=true")
    bis = Bisection(float(low), float(high), float(p.search_tolerance), int(p.search_max_probes), closed,
                    int(p.search_recheck))
    base = OmegaConf.to_container(cfg.load, resolve=True)
    min_att = cfg.slo.min_attainment
    judged: list[int] = []  # requests each probe's SLO percentile was judged on
    while (load := bis.next_load()) is not None:
        key = "concurrency" if closed else "rate"
        value = int(load) if closed else round(load, 4)
        spec = runs_from_points(base, [{key: value}], prefix="search/")[0]
        again = bis.measured(float(value))  # a re-measurement of a miss: a folder of its own
        spec.subdir = f"search/{key}={value:g}" + (f"-recheck{again}" if again else "")
        spec.tags = {"role": "search"}
        d = exp.session_dir(s) / spec.subdir
        if results_io.run_complete(d):
            summary = results_io.read_json(d / results_io.SUMMARY)
        else:
            summary = exp.session.run_point(spec, last=False).summary
        ok, why = slo_holds(summary, min_att)
        judged.append(int(summary.get("completed") or 0) + int(summary.get("failed") or 0))
        said = bis.record(float(value), ok, spec.subdir, why)
        print(f"  search: {key}={value:g} {'meets' if ok else 'misses'} the SLO" + (f" ({why})" if why else "")
              + (f": {said}" if said else ""), flush=True)
    result = bis.result()
    at = result["max_load_under_slo"]
    hit = next((pr for pr in bis.probes if pr.passed and pr.load == at), None)
    if hit is not None:  # goodput and cost where the SLO still holds
        m = results_io.read_json(exp.session_dir(s) / hit.run_dir / results_io.SUMMARY)
        result.update({k: m.get(k) for k in ("goodput_rps", "good_output_throughput", "cost_per_mtok_good",
                                              "cost_total", "good_output_tokens", "output_throughput")})
    result.update({"config": s.config, "block": s.block, "kind": "concurrency" if closed else "rate"})
    warning = thin_percentile_warning(float(cfg.slo.percentile), judged)
    if warning:
        result["warning"] = warning
    results_io.write_json(exp.session_dir(s) / "search.json", result)
    print(f"  max load under the SLO: {at:g} (bracket {result['bracket']}; {result['note']})", flush=True)
    if warning:
        print(f"  WARNING: {warning}", flush=True)
