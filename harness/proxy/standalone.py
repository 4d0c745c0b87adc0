"""The promotion proxy on its own (``tokenfactory proxy [overrides]``), until Ctrl-C.

    tokenfactory proxy proxy.incumbent=http://127.0.0.1:8001 proxy.candidate=http://127.0.0.1:8002 \\
        proxy.mode=canary proxy.canary_share=0.05 proxy.port=8080 slo.ttft_ms=500

Writes ``OUTPUT_DIR/requests.parquet`` (both sides, ``side`` and ``shadow`` columns) and, when it
stops, ``proxy_summary.json``: each side's summary (``metrics.summary``, the same keys as a
run's), the greedy outputs' agreement and the failovers.  A rollback is this command with
``proxy.mode=rollback`` (the candidate may then be left out).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from omegaconf import OmegaConf

from conf.schema import Proxy, typed
from harness import results_io
from harness.proxy.build import build_server
from harness.proxy.pairs import PairBook
from harness.proxy.runtime import place, quiet_gc


def explicit_tokenizer(cfg):
    """The tokenizer to cut outputs into tokens: ``engine.tokenizer`` or ``engine.model`` if given."""
    name = cfg.engine.tokenizer or cfg.engine.model
    if not name:
        return None
    from loadgen.workloads.prompts import load_tokenizer

    return load_tokenizer(str(name))


def summarize_sides(path: Path, slo_cfg, start_ns: int, end_ns: int) -> dict:
    """Each side's ``metrics.summary.summarize`` over the proxy's rows (shadow copies included)."""
    import pyarrow.compute as pc

    from metrics.slo import SLO
    from metrics.summary import summarize

    table = results_io.read_parquet(path)
    out = {}
    for side in ("incumbent", "candidate"):
        t = table.filter(pc.equal(table.column("side"), side))
        if t.num_rows:
            out[side] = summarize(t, SLO.from_config(slo_cfg), start_ns, end_ns)
    return out


class StandaloneProxy:
    """A proxy ready to serve: its folder, its server and the book of the two sides' outputs."""

    def __init__(self, cfg):
        """Everything that can fail on the user's config, before anything is served: ``ValueError``
        naming the key."""
        self.cfg = cfg
        self.pcfg = pcfg = typed(cfg.proxy, Proxy)
        tokenizer = explicit_tokenizer(cfg) if pcfg.compare != "off" else None
        self.out = Path(cfg.output_dir or os.path.join("results", cfg.experiment,
                                                       "proxy-" + results_io.new_run_id()))
        self.out.mkdir(parents=True, exist_ok=True)
        self.pairs = PairBook(tokenizer)
        self.agreements = []
        self.server = build_server(pcfg, cfg.slo, self.out / results_io.REQUESTS, on_row=self.on_row)
        self.placed = place(pcfg)

    def on_row(self, row) -> None:
        if row.compare:
            got = self.pairs.add(row.request_id, row.side, row.text, row.status == "ok")
            if got is not None:
                self.agreements.append(got)

    def serve(self) -> Path:
        """Serve until SIGINT or SIGTERM, then write ``proxy_summary.json``; returns its path."""
        cfg, pcfg, server, placed = self.cfg, self.pcfg, self.server, self.placed
        results_io.write_yaml(self.out / results_io.CONFIG,
                             results_io.redact(OmegaConf.to_container(cfg, resolve=True)))
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass

        async def main() -> tuple[int, int]:
            loop = asyncio.get_running_loop()
            stop = asyncio.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            try:
                port = await server.start()
            except OSError as e:
                raise SystemExit(f"error: proxy.port={pcfg.port} on {pcfg.host}: {e}") from None
            quiet_gc()
            start = time.perf_counter_ns()
            print(f"proxy on http://{pcfg.host}:{port} ({pcfg.mode}"
                  + (f", candidate share {pcfg.canary_share:g}" if pcfg.mode == "canary" else "")
                  + f"): incumbent {pcfg.incumbent}, candidate {pcfg.candidate}"
                  + (f"; {', '.join(placed)}" if placed else "") + "; Ctrl-C stops it", flush=True)
            await stop.wait()
            await server.stop()
            return start, time.perf_counter_ns()

        start, end = asyncio.run(main())
        path = server.recorder.close()
        from conf.schema import PromoteGate
        from metrics.promotion_gate import agreement_check

        summary = {"mode": pcfg.mode, "canary_share": pcfg.canary_share, "rows": server.recorder.rows,
                   "failovers": server.failovers, "sides": summarize_sides(Path(path), cfg.slo, start, end)
                   if server.recorder.rows else {},
                   "agreement": {"unit": self.pairs.unit,
                                 **agreement_check(self.agreements, PromoteGate().min_agreement, min_pairs=1,
                                                   required=False)}}
        results_io.write_json(self.out / "proxy_summary.json", summary)
        print(f"proxy stopped: {server.recorder.rows} rows in {path}; {self.out / 'proxy_summary.json'}")
        return self.out / "proxy_summary.json"
