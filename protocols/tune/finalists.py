"""protocol=tune protocol.screen=model: the screen's finalists measured and the winner confirmed."""

from __future__ import annotations

import time

from harness import results_io
from metrics import model_error, tune_verdict
from protocols.tune.state import TuneState
from protocols.tune.trials import TRIAL_FILE, Trials, params_key

CONFIRM_DIR = "confirm"  # screen=model: the winner measured a second time


class Finalists:
    """screen=model: the finalists (the state's ``screened``) measured by ``trials``, the winner
    confirmed, and their record."""

    def __init__(self, state: TuneState, trials: Trials):
        self.state = state
        self.trials = trials

    def measure_finalists(self) -> None:
        """The screen's finalists measured, each a trial; then the best of them measured again in
        ``OUT/confirm/`` (``protocol.confirm``): the result stands on measurements only."""
        st, trials = self.state, self.trials
        for params in st.screened["finalists"]:
            trials.run_trial(params)
        if not st.cfg.protocol.confirm:
            return
        mine = [{**t, **trials.verdict(t)} for t in trials.read_trials() if t["status"] == "complete"
                and params_key(t["params"]) in {params_key(f) for f in st.screened["finalists"]}]
        winner = tune_verdict.best_trial(mine, str(st.cfg.protocol.objective))
        if winner is None:
            print("no finalist met the SLO when measured: nothing to confirm", flush=True)
            return
        folder = st.out / CONFIRM_DIR
        old = results_io.read_json(folder / TRIAL_FILE, None)
        if old and old.get("status") == "complete" and params_key(old["params"]) == params_key(winner["params"]):
            print(f"confirmation of trial {winner['trial']}: already measured, read back", flush=True)
            return
        folder.mkdir(parents=True, exist_ok=True)
        record = {"trial": f"confirm{winner['trial']}", "of_trial": winner["trial"], "folder": CONFIRM_DIR,
                  "params": winner["params"], "overrides": winner["overrides"], "status": "running",
                  "started": time.time()}
        results_io.write_json(folder / TRIAL_FILE, record)
        print(f"confirming trial {winner['trial']} by a second measurement ({folder})", flush=True)
        t0 = time.monotonic()
        error = trials.measure(winner["params"], winner["overrides"], folder, "the confirmation")
        record.update(status="complete", error=error, duration_s=round(time.monotonic() - t0, 3))
        results_io.write_json(folder / TRIAL_FILE, record)

    def screen_record(self, trials: list[dict]) -> tuple[dict, dict | None, str | None]:
        """tune.json's ``screen`` (the model's ranking, each finalist's modelled figures beside its
        measured ones and whether they disagree beyond the validated error), the best trial as
        measured and confirmed (None where no result stands) and the note on it."""
        st = self.state
        p = st.cfg.protocol
        objective = str(p.objective)
        bound = (st.validated or {}).get("bound")
        tol = float(p.search_tolerance)
        modelled = {params_key(c["params"]): c for c in st.screened["configs"]}
        by = {params_key(t["params"]): t for t in trials}
        rows = []
        for params in st.screened["finalists"]:
            m, t = modelled[params_key(params)], by.get(params_key(params))
            row = {"params": params, "trial": t["trial"] if t else None,
                   "modelled": {k: m.get(k) for k in ("max_load_under_slo", "objective", "cost_per_mtok_good",
                                                       "rank")},
                   "measured": None if not t or t["status"] != "complete" else
                   {k: t.get(k) for k in ("feasible", "why", "max_load_under_slo", "objective", "cost_per_mtok_good")}}
            if row["measured"] is None:
                row.update(disagrees=None, note="not measured yet")
            elif not row["measured"]["feasible"]:
                row.update(disagrees=True, note=f"the model has it meet the SLO up to {m['max_load_under_slo']:g} "
                                                f"req/s; measured, it is infeasible: {t.get('why')}")
            else:
                row["max_load"] = model_error.disagreement(m["max_load_under_slo"], t["max_load_under_slo"], bound,
                                                           tol)
                row["objective"] = model_error.disagreement(m["objective"], t["objective"], bound, tol)
                flags = [row["max_load"]["disagrees"], row["objective"]["disagrees"]]
                row["disagrees"] = True if True in flags else (None if None in flags else False)
                row["note"] = (f"max load modelled {m['max_load_under_slo']:g} vs measured "
                               f"{t['max_load_under_slo']:g} req/s ({row['max_load']['error']:+.0%}), {objective} "
                               f"{row['objective']['error']:+.0%}: " +
                               ("beyond the validated error and the search's tolerance "
                                f"(±{row['max_load']['limit']:.0%}): the model disagrees with the measurement"
                                if row["disagrees"] else
                                f"within ±{row['max_load']['limit']:.0%}" if row["disagrees"] is False else
                                "not judged: the model is not validated"))
            rows.append(row)
        rec = {k: v for k, v in st.screened.items() if k != "finalists"}
        rec.update(validated_error=st.validated, validated=model_error.describe(st.validated),
                   finalists=rows, disagreeing=[r["trial"] for r in rows if r["disagrees"]])
        best = tune_verdict.best_trial(trials, objective)
        note = None
        confirm = results_io.read_json(st.out / CONFIRM_DIR / TRIAL_FILE, None)
        if best and p.confirm:
            if (not confirm or confirm.get("status") != "complete"
                    or params_key(confirm["params"]) != params_key(best["params"])):
                best, note = None, "the best measured finalist is not confirmed yet (its second measurement)"
            else:
                v = self.trials.verdict(confirm)
                said = (f"confirmed by a second measurement: {objective} {v['objective']:.4g} at max load "
                        f"{v['max_load_under_slo']:g}" if v["feasible"] else
                        f"not confirmed: its second measurement is infeasible: {v['why']}")
                rec["confirmation"] = {"trial": best["trial"], "folder": CONFIRM_DIR, "params": best["params"],
                                       **{k: v.get(k) for k in ("feasible", "why", "max_load_under_slo", "objective",
                                                                "cost_per_mtok_good")}, "said": said}
                if v["feasible"]:
                    best = {**best, "confirmation": rec["confirmation"]}
                else:
                    best, note = None, (f"trial {rec['confirmation']['trial']} was the best measured finalist but "
                                        f"is {said}: no result stands")
        elif best:
            best = {**best, "confirmation": {"said": "one measurement (protocol.confirm=false)"}}
        return rec, best, note
