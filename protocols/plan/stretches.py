"""Stretch sampling: the scheduler replica model's approximation (``protocol.replay_sample``
below 1), replaying a sample of each replica's stream instead of all of it.  Exact replay
advances every decode step of the whole window (about 150 CPU seconds for a day at 5 req/s,
docs/measured/plan.md); a plan's replica counts and resamples multiply that.

The rule, for one stream (arrival s, prompt tokens, output tokens; arrival order):

1. **Stretches.** The window is cut into stretches of ``stretch_s`` seconds on the traffic's
   clock (stretch ``floor(arrival / stretch_s)``, the same edges on every replica); only those
   holding a request count: M of them.
2. **Strata.** Each stretch is scored by what sets its latencies, relative to the stream's
   mean stretch: ``score = P/mean(P) + O/mean(O) + B/mean(B)``, P its prompt tokens, O its output
   tokens, B the requests of its busiest minute (its burst).  The stretches sorted by score
   (stable) are cut into n = max(round(fraction x M), MIN_STRATA) strata of equal count (rank r
   in stratum floor(r x n / M)); n >= M replays the whole stream.  The floor: with 2 to 4 strata
   a short stream's sample missed its exact attainment by 3 to 19 points (6 h of diurnal traffic
   on one replica, docs/measured/plan.md), with 14 (a day) by 0.3.
3. **Sample.** One stretch per stratum, drawn uniformly (``numpy.random.default_rng(seed)``),
   is replayed; so n of the M stretches, a fraction of about ``fraction``.
4. **Lead-in.** Each replayed stretch is replayed after the ``lead_s`` seconds of requests
   before it, whose records are dropped: the engine's queue and batch at the stretch's start
   are then those the requests just before it left (a backlog older than the lead-in is not;
   see the drain check).  Windows that overlap are merged into one block; blocks are packed
   into one trace, each starting ``gap_s`` after the last arrival of the one before (the
   replay skips idle time at no cost), and replayed as one stream.
5. **Assignment.** A request of a stretch not replayed takes the TTFT and TPOT of one donor:
   a request of its stratum's replayed stretch, at the same quantile of (prompt, output)
   order.  The stratum's other requests are sorted by (prompt tokens, output tokens, a seeded
   random key), so are the donors; the request at rank i of N gets the donor at rank
   ``floor((i + 0.5) / N x m)`` of m.  A replayed stretch's requests keep their own records.

6. **The lead-in check.**  The sample is replayed a second time, beside the first, with the
   lead-in doubled (the same stretches, so the same requests kept).  Where a replica is near or
   past its capacity a backlog builds over longer than any lead-in (hours, on a diurnal day
   peaking past it), the replayed stretches start with too short a queue, and the sample
   underestimates latency and cost: a day peaking at 1.11x a 4-slot replica's capacity, 10 %
   sampled, read its cost per good token 7 to 40 % below exact replay while no block failed the
   drain check below (docs/measured/plan.md).  So where the replayed stretches' mean TTFT or
   mean TPOT moves by more than ``LEAD_IN_TOLERANCE`` with the doubled lead-in, the sample is
   refused and the stream replayed whole (the note: ``replayed_whole``, ``lead_in_shift``).
   Within capacity the doubled lead-in leaves the records as they were (0.0 on that replica
   peaking at 0.8x) and the sample stands.

Every request gets a record, so the plan's attainment, goodput and percentiles are computed
over the full stream as under exact replay.  Deterministic: the seed is the stream's cache
key's, so a stream gives the same sample wherever it is replayed.

The drain check: a block whose requests have not all finished when the next block's first
request arrives (``undrained_blocks``: a day later, so only far past capacity), and
``max_drain_s`` (the last completion after a block's last arrival), recorded in the note.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

BLOCKS_PER_JOB = 8          # a sampled stream's packed blocks replayed per job (serve_sampled)
MIN_STRATA = 8              # the fewest stretches a sampled stream replays (module doc, 2)
LEAD_IN_FACTOR = 2          # the lead-in check's lead-in, in lead-ins (module doc, 6)
LEAD_IN_TOLERANCE = 0.01    # the check's largest relative move of the stretches' mean TTFT or TPOT

@dataclass(frozen=True)
class StretchSample:
    """The approximation's knobs (``protocol.replay_sample``, ``replay_stretch_s``,
    ``replay_lead_s``); ``fraction`` 1: exact replay."""
    fraction: float = 1.0
    stretch_s: float = 300.0
    lead_s: float = 120.0
    gap_s: float = 86400.0

    @property
    def exact(self) -> bool:
        return self.fraction >= 1.0

    def describe(self) -> dict:
        return {"fraction": self.fraction, "stretch_s": self.stretch_s, "lead_s": self.lead_s, "gap_s": self.gap_s,
                "lead_in_check": {"lead_s": self.check().lead_s, "tolerance": LEAD_IN_TOLERANCE}}

    def check(self) -> StretchSample:
        """The lead-in check's sample: the same stretches after a longer lead-in (module doc, 6)."""
        return dataclasses.replace(self, lead_s=LEAD_IN_FACTOR * self.lead_s)

    def text(self) -> str:
        return (f"approximate: {self.fraction:.0%} of each replica's {self.stretch_s:g} s stretches replayed "
                f"(stratified, each after a {self.lead_s:g} s lead-in), the others given their stratum's "
                "replayed latencies")


@dataclass
class SamplePlan:
    """Which requests of one stream are replayed and where their latencies go."""
    n: int                       # the stream's requests
    stretch: np.ndarray          # per request, its stretch (0..M-1 over the stretches holding requests)
    stratum: np.ndarray          # per stretch, its stratum
    chosen: np.ndarray           # per stratum, its replayed stretch
    replay: np.ndarray           # the requests replayed (lead-ins included), in arrival order
    keep: np.ndarray             # per replayed request: in a replayed stretch (its record is kept)
    arrival: np.ndarray          # per replayed request, its arrival in the packed trace
    block: np.ndarray            # per replayed request, its block


def stretch_scores(arrival_s, prompt_tokens, output_tokens, stretch_s: float) -> tuple[np.ndarray, ...]:
    """(per request its stretch 0..M-1, per stretch its score, per stretch its number on the
    traffic's clock; module doc, 1-2)."""
    arr = np.asarray(arrival_s, dtype=np.float64)
    ids = np.floor(arr / stretch_s).astype(np.int64)
    uniq, stretch = np.unique(ids, return_inverse=True)
    m = uniq.size
    p = np.bincount(stretch, weights=np.asarray(prompt_tokens, dtype=np.float64), minlength=m)
    o = np.bincount(stretch, weights=np.asarray(output_tokens, dtype=np.float64), minlength=m)
    minute = np.floor(arr / min(60.0, stretch_s)).astype(np.int64)
    mu, mi = np.unique(minute, return_inverse=True)
    per_minute = np.bincount(mi)
    busiest = np.zeros(m)
    np.maximum.at(busiest, stretch[np.searchsorted(minute, mu)], per_minute)
    score = sum(x / x.mean() if x.mean() > 0 else np.zeros(m) for x in (p, o, busiest))
    return stretch, score, uniq


def plan_sample(arrival_s, prompt_tokens, output_tokens, sample: StretchSample, seed: int) -> SamplePlan | None:
    """The sample of one stream (module doc); None where the whole stream is replayed (exact,
    or the sample would replay as many requests)."""
    arr = np.asarray(arrival_s, dtype=np.float64)
    if sample.exact or arr.size == 0:
        return None
    stretch, score, ids = stretch_scores(arr, prompt_tokens, output_tokens, sample.stretch_s)
    m = score.size
    n = max(int(round(sample.fraction * m)), MIN_STRATA)
    if n >= m:
        return None
    rng = np.random.default_rng(seed)
    rank = np.empty(m, dtype=np.int64)
    rank[np.argsort(score, kind="stable")] = np.arange(m)
    stratum = rank * n // m
    order = np.argsort(stratum, kind="stable")                # stretches grouped by stratum, in time order
    starts = np.searchsorted(stratum[order], np.arange(n))
    sizes = np.bincount(stratum, minlength=n)
    chosen = order[starts + (rng.random(n) * sizes).astype(np.int64)]
    # each chosen stretch's window [its start - lead_s, its end) on the traffic's clock
    lo = np.sort(ids[chosen]) * sample.stretch_s
    win = np.stack([lo - sample.lead_s, lo + sample.stretch_s], axis=1)
    blocks = [list(win[0])]
    for a, b in win[1:]:
        if a <= blocks[-1][1]:
            blocks[-1][1] = b
        else:
            blocks.append([a, b])
    replay, block = [], []
    for k, (a, b) in enumerate(blocks):
        i = np.flatnonzero((arr >= a) & (arr < b))
        replay.append(i)
        block.append(np.full(i.size, k))
    replay_i, block_i = np.concatenate(replay), np.concatenate(block)
    if replay_i.size >= arr.size:
        return None
    keep = np.isin(stretch[replay_i], chosen)
    packed = np.empty(replay_i.size)
    offset = 0.0
    for k in range(len(blocks)):
        sel = block_i == k
        if not sel.any():
            continue
        t = arr[replay_i[sel]]
        packed[sel] = t - t[0] + offset
        offset = packed[sel][-1] + sample.gap_s
    return SamplePlan(arr.size, stretch, stratum, chosen, replay_i, keep, packed, block_i)


def _sort_key(prompt, output, rng) -> np.ndarray:
    return np.lexsort((rng.random(prompt.size), output, prompt))


def expand(plan: SamplePlan, prompt_tokens, output_tokens, ttft_r, tpot_r, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Every request's (TTFT, TPOT) from the replayed requests' (``ttft_r``, ``tpot_r``, in
    ``plan.replay``'s order; module doc, 5)."""
    prompt, out = np.asarray(prompt_tokens), np.asarray(output_tokens)
    ttft, tpot = np.full(plan.n, np.nan), np.full(plan.n, np.nan)
    kept = plan.replay[plan.keep]
    ttft[kept], tpot[kept] = np.asarray(ttft_r)[plan.keep], np.asarray(tpot_r)[plan.keep]
    donor_of = np.full(plan.n, -1, dtype=np.int64)       # request -> position in the replayed arrays
    donor_of[kept] = np.flatnonzero(plan.keep)
    rng = np.random.default_rng(seed + 1)
    req_stratum = plan.stratum[plan.stretch]
    is_chosen = np.zeros(plan.stratum.size, dtype=bool)
    is_chosen[plan.chosen] = True
    replayed_req = is_chosen[plan.stretch]
    for g, c in enumerate(plan.chosen):
        donors = np.flatnonzero(plan.stretch == c)
        targets = np.flatnonzero((req_stratum == g) & ~replayed_req)
        if targets.size == 0:
            continue
        donors = donors[_sort_key(prompt[donors], out[donors], rng)]
        targets = targets[_sort_key(prompt[targets], out[targets], rng)]
        pick = donors[((np.arange(targets.size) + 0.5) / targets.size * donors.size).astype(np.int64)]
        ttft[targets] = ttft[pick]
        tpot[targets] = tpot[pick]
    return ttft, tpot


def drain(plan: SamplePlan, output_tokens, ttft_r, tpot_r) -> dict:
    """The drain check (module doc) from the replayed requests' records."""
    out = np.asarray(output_tokens, dtype=np.float64)[plan.replay]
    e2e = np.asarray(ttft_r) + np.where(np.isnan(tpot_r), 0.0, tpot_r) * np.maximum(out - 1, 0)
    done = plan.arrival + e2e
    undrained, worst = 0, 0.0
    nb = int(plan.block.max()) + 1 if plan.block.size else 0
    for k in range(nb):
        sel = plan.block == k
        last_arrival = plan.arrival[sel][-1]
        fin = done[sel]
        worst = max(worst, float(np.nanmax(fin)) - last_arrival if np.isfinite(fin).any() else math.inf)
        nxt = plan.arrival[plan.block == k + 1]
        if np.isnan(fin).any() or (nxt.size and np.nanmax(fin) > nxt[0]):
            undrained += 1
    return {"blocks": nb, "undrained_blocks": undrained, "max_drain_s": worst}


def note(plan: SamplePlan, check: dict, shift: float = 0.0, whole: bool = False) -> dict:
    """One stream's sample in numbers; ``whole``: refused by the lead-in check (module doc, 6) and
    replayed whole, its every stretch and request replayed."""
    out = {"streams": 1, "requests": plan.n, "stretches": int(plan.stratum.size),
           "replayed_stretches": int(plan.chosen.size), "replayed_requests": int(plan.keep.sum()),
           "lead_in_requests": int((~plan.keep).sum()), **check, "replayed_whole": int(whole), "lead_in_shift": shift}
    if whole:
        out.update(replayed_stretches=out["stretches"], replayed_requests=plan.n, lead_in_requests=0)
    return out


def lead_in_shift(kept: tuple, wider: tuple) -> float:
    """The largest relative move of the replayed stretches' mean TTFT and mean TPOT between their
    records after the lead-in (``kept``: (TTFT, TPOT)) and after the longer one (``wider``); inf
    where one completed requests the other did not."""
    worst = 0.0
    for a, b in zip(kept, wider):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if not np.array_equal(np.isnan(a), np.isnan(b)):
            return math.inf
        ma, mb = (float(np.nanmean(x)) if np.isfinite(x).any() else 0.0 for x in (a, b))
        if ma != mb:
            worst = max(worst, abs(mb - ma) / abs(ma) if ma else math.inf)
    return worst


def combine(notes: list[dict], sample: StretchSample) -> dict | None:
    """The notes of a simulation's streams as one (sums; the worst drain); None where every
    stream was replayed whole."""
    notes = [x for x in notes if x]
    if not notes:
        return None
    tot = {k: sum(x[k] for x in notes) for k in ("streams", "requests", "stretches", "replayed_stretches",
                                                 "replayed_requests", "lead_in_requests", "blocks",
                                                 "undrained_blocks")}
    tot["max_drain_s"] = max(x["max_drain_s"] for x in notes)
    tot["replayed_whole"] = sum(x.get("replayed_whole", 0) for x in notes)
    tot["lead_in_shift"] = max(x.get("lead_in_shift", 0.0) for x in notes)
    share = tot["replayed_stretches"] / tot["stretches"] if tot["stretches"] else 0.0
    text = (f"approximate: {share:.1%} of the replicas' stretches replayed ({tot['replayed_stretches']} of "
            f"{tot['stretches']}, {sample.stretch_s:g} s each, after {sample.lead_s:g} s lead-ins; "
            f"{tot['replayed_requests'] / tot['requests']:.1%} of the requests), the others given their "
            "stratum's replayed latencies")
    if tot["replayed_whole"]:
        whole = (f"{tot['replayed_whole']} of {tot['streams']} sampled stream(s) replayed whole: their replayed "
                 f"stretches' mean latency moved by up to {tot['lead_in_shift']:.1%} with a "
                 f"{sample.check().lead_s:g} s lead-in (over {LEAD_IN_TOLERANCE:.0%}: a backlog older than the "
                 "lead-in, a replica near or past capacity, where a sample underestimates latency and cost)")
        text = "exact replay, the sample refused: " + whole if tot["replayed_whole"] == tot["streams"] else \
            text + "; " + whole
    if tot["undrained_blocks"]:
        text += (f"; {tot['undrained_blocks']} replayed block(s) had not drained {sample.gap_s:g} s after their "
                 "last arrival: a replica near or past capacity, where the approximation does not hold")
    return {**sample.describe(), **tot, "replayed_share": share, "text": text}


def serve_sampled(streams: list[tuple], replay, sample: StretchSample, seeds: list[int]):
    """Each stream's (TTFT, TPOT) under the sample, replaying by ``replay`` (list of streams ->
    list of (TTFT, TPOT)); the streams sampled are replayed in one call with the others, each
    sampled stream as jobs of at most ``BLOCKS_PER_JOB`` of its packed blocks (drained blocks
    are independent: one replica's sample is then replayed on several cores; a fixed rule, so
    the result does not depend on the number of cores), its lead-in check's blocks beside them
    (module doc, 6); a stream the check refuses is replayed whole in a second call.  Returns
    (per stream its (TTFT, TPOT), per stream its note or None)."""
    plans = [plan_sample(s[0], s[1], s[2], sample, seed) for s, seed in zip(streams, seeds)]
    wider = sample.check()
    checks = [plan_sample(s[0], s[1], s[2], wider, seed) if p is not None else None
              for s, p, seed in zip(streams, plans, seeds)]
    jobs, owner = [], []
    for k, (s, p, c) in enumerate(zip(streams, plans, checks)):
        if p is None or c is None:           # replayed whole (its check: the whole stream)
            jobs.append(s)
            owner.append((k, "whole"))
        for kind, q in (("sample", p), ("check", c)):
            if p is not None and q is not None:
                jobs += _block_jobs(s, q)
                owner += [(k, kind)] * (len(jobs) - len(owner))
    done = replay(jobs)
    parts: dict[tuple, list] = {}
    for key, res in zip(owner, done):
        parts.setdefault(key, []).append(res)
    joined = {key: (np.concatenate([x[0] for x in v]), np.concatenate([x[1] for x in v])) for key, v in parts.items()}
    got, notes, refused = [], [], []
    for k, (s, p, c, seed) in enumerate(zip(streams, plans, checks, seeds)):
        if p is None:
            got.append(joined[(k, "whole")])
            notes.append(None)
            continue
        tt, tp = joined[(k, "sample")]
        kept = (tt[p.keep], tp[p.keep])
        if c is None:
            whole = joined[(k, "whole")]
            wide = (whole[0][p.replay[p.keep]], whole[1][p.replay[p.keep]])
        else:
            ct, cp = joined[(k, "check")]
            wide = (ct[c.keep], cp[c.keep])
        shift = lead_in_shift(kept, wide)
        if shift > LEAD_IN_TOLERANCE:
            got.append(joined.get((k, "whole")))
            refused.append(k)
        else:
            got.append(expand(p, s[1], s[2], tt, tp, seed))
        notes.append(note(p, drain(p, s[2], tt, tp), shift, whole=shift > LEAD_IN_TOLERANCE))
    again = [k for k in refused if got[k] is None]
    for k, res in zip(again, replay([streams[k] for k in again]) if again else []):
        got[k] = res
    return got, notes


def _block_jobs(s: tuple, p: SamplePlan) -> list[tuple]:
    """A sampled stream's packed blocks as jobs of at most ``BLOCKS_PER_JOB`` blocks."""
    jobs = []
    for first in range(0, int(p.block.max()) + 1, BLOCKS_PER_JOB):
        i = np.flatnonzero((p.block >= first) & (p.block < first + BLOCKS_PER_JOB))
        r = p.replay[i]
        sub = (p.arrival[i], np.asarray(s[1])[r], np.asarray(s[2])[r])
        if len(s) > 3:
            sub += ([s[3][j] for j in r],)
        jobs.append(sub)
    return jobs
