"""``tokenfactory proxy [overrides]``: the promotion proxy on its own, until Ctrl-C.

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
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

from harness import results_io
from harness.proxy.build import build_server
from harness.proxy.pairs import PairBook
from harness.proxy.runtime import place, quiet_gc


def explicit_tokenizer(cfg):
    """The tokenizer to cut outputs into tokens: ``engine.tokenizer`` or ``engine.model`` if given."""
    name = cfg.engine.get("tokenizer") or cfg.engine.get("model")
    if not name:
        return None
    from loadgen.workloads.prompts import load_tokenizer

    return load_tokenizer(str(name))


def summarize_sides(path: Path, slo_cfg, start_ns: int, end_ns: int) -> dict:
    """Each side's ``metrics.summary.summarize`` over the proxy's rows (shadow copies included)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from metrics.slo import SLO
    from metrics.summary import summarize

    table = pq.read_table(path)
    out = {}
    for side in ("incumbent", "candidate"):
        t = table.filter(pc.equal(table.column("side"), side))
        if t.num_rows:
            out[side] = summarize(t, SLO.from_config(slo_cfg), start_ns, end_ns)
    return out


def proxy_command(argv: list[str]) -> int:
    from conf.compose import compose_config
    from conf.schema import ConfigError, validate

    try:
        cfg = compose_config(argv)
        validate(cfg)
        pcfg = OmegaConf.to_container(cfg.proxy, resolve=True)
        tokenizer = explicit_tokenizer(cfg) if pcfg["compare"] != "off" else None
        out = Path(cfg.output_dir or os.path.join("results", str(cfg.experiment), "proxy-" + results_io.new_run_id()))
        out.mkdir(parents=True, exist_ok=True)
        pairs = PairBook(tokenizer)
        agreements = []

        def on_row(row):
            if row.compare:
                got = pairs.add(row.request_id, row.side, row.text, row.status == "ok")
                if got is not None:
                    agreements.append(got)

        server = build_server(pcfg, cfg.slo, out / "requests.parquet", on_row=on_row)
        placed = place(pcfg)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - Hydra's composition errors: the override is in the message
        print(f"error: {e} {e.__cause__ or ''}".strip(), file=sys.stderr)
        return 2
    results_io.write_yaml(out / "config.yaml", results_io.redact(OmegaConf.to_container(cfg, resolve=True)))
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
            raise SystemExit(f"error: proxy.port={pcfg['port']} on {pcfg['host']}: {e}") from None
        quiet_gc()
        start = time.perf_counter_ns()
        print(f"proxy on http://{pcfg['host']}:{port} ({pcfg['mode']}"
              + (f", candidate share {pcfg['canary_share']:g}" if pcfg["mode"] == "canary" else "")
              + f"): incumbent {pcfg['incumbent']}, candidate {pcfg.get('candidate')}"
              + (f"; {', '.join(placed)}" if placed else "") + "; Ctrl-C stops it", flush=True)
        await stop.wait()
        await server.stop()
        return start, time.perf_counter_ns()

    start, end = asyncio.run(main())
    path = server.recorder.close()
    from conf.schema import PromoteGate
    from metrics.promotion_gate import agreement_check

    summary = {"mode": pcfg["mode"], "canary_share": pcfg["canary_share"], "rows": server.recorder.rows,
               "failovers": server.failovers, "sides": summarize_sides(Path(path), cfg.slo, start, end)
               if server.recorder.rows else {},
               "agreement": {"unit": pairs.unit, **agreement_check(agreements, PromoteGate().min_agreement, min_pairs=1,
                                                                  required=False)}}
    results_io.write_json(out / "proxy_summary.json", summary)
    print(f"proxy stopped: {server.recorder.rows} rows in {path}; {out / 'proxy_summary.json'}")
    return 0
