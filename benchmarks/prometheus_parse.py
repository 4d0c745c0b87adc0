"""How fast the Prometheus text parser reads an engine's /metrics page: ours
(``engines/prometheus.py``, strict: a malformed line is an error naming it) against
``prometheus_client``'s parser, where that package is installed.

    python benchmarks/prometheus_parse.py [--page FILE | --url http://HOST:PORT/metrics]

The default page is a real vLLM 0.32.0 /metrics page (614 lines, tiny model on CPU).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engines import prometheus  # noqa: E402
from engines.http import http_get  # noqa: E402


def per_page_ms(fn, text: str, seconds: float = 1.0) -> float:
    fn(text)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn(text)
        n += 1
    return (time.perf_counter() - t0) / n * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--page", default=str(ROOT / "tests" / "fixtures" / "vllm_0.32.0_metrics_full.txt"))
    ap.add_argument("--url")
    a = ap.parse_args()
    if a.url:
        status, body = http_get(a.url, timeout=10)
        text = body.decode("utf-8", "replace")
    else:
        text = Path(a.page).read_text()
    lines = text.count("\n")
    ours = per_page_ms(lambda t: prometheus.parse(t), text)
    print(f"page: {a.url or a.page} ({lines} lines, {len(prometheus.parse(text)[0])} samples)")
    print(f"tokenfactory (engines/prometheus.py): {ours:.3f} ms/page")
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        print("prometheus_client: not installed (pip install prometheus_client to compare)")
        return
    theirs = per_page_ms(lambda t: [s for f in text_string_to_metric_families(t) for s in f.samples], text)
    print(f"prometheus_client: {theirs:.3f} ms/page ({theirs / ours:.1f}x ours)")


if __name__ == "__main__":
    main()
