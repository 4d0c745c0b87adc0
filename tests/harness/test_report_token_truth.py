"""The report's token truth (issue 35, items 1 and 4): TTFT against the cached share of the
prompt from the rows' ``cached_tokens``, and a first-screen line when a run's client and server
token counts disagree beyond ``client.token_mismatch_threshold``."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.synthetic_experiment import write_experiment


def _with_cached(d, shares) -> None:
    """Give the run's rows prompt_tokens = 100 and cached_tokens = share x 100, cycling ``shares``."""
    t = pq.read_table(d / "requests.parquet")
    n = t.num_rows
    cached = [int(shares[i % len(shares)] * 100) for i in range(n)]
    t = t.set_column(t.schema.get_field_index("prompt_tokens"), "prompt_tokens", pa.array([100] * n, pa.int64()))
    t = t.set_column(t.schema.get_field_index("cached_tokens"), "cached_tokens", pa.array(cached, pa.int64()))
    pq.write_table(t, d / "requests.parquet")


def test_cache_view_bins_ttft_by_cached_share(tmp_path):
    from harness.report.data import load
    from harness.report.requests_view import read_run

    exp = write_experiment(tmp_path / "exp", requests=20, rates=(5.0,), blocks=1)
    run = load(exp).ours[0]
    assert read_run(run).cache_ttft is None  # no row reports cached tokens
    _with_cached(run.dir, [0.0, 0.5, 1.0, 0.25])
    share, ttft = read_run(run).cache_ttft
    t = pq.read_table(run.dir / "requests.parquet")
    ok = [s == "ok" and not w for s, w in zip(t.column("status").to_pylist(), t.column("warmup").to_pylist())]
    assert share.size == sum(ok)
    assert sorted(set(share.tolist())) <= [0.0, 0.25, 0.5, 1.0]


@pytest.mark.slow  # two pages rendered (seconds each)
def test_disagreeing_counts_on_the_first_screen_and_the_cache_figure(tmp_path):
    from harness.report.build import render
    from harness.results_io import find_run_dirs, read_json, write_json

    exp = write_experiment(tmp_path / "exp", requests=20, rates=(5.0,), blocks=1)
    dirs = find_run_dirs(exp)
    page = render(exp, tmp_path / "r0.html", static_figures=False).read_text()
    assert "TOKEN COUNTS DISAGREE" not in page and "TTFT against the cached share" not in page
    _with_cached(dirs[0], [0.0, 1.0])
    write_json(dirs[0] / "summary.json", read_json(dirs[0] / "summary.json") | {
        "token_counts_disagree": True, "token_counts_compared": 20, "token_mismatch_rate": 0.25,
        "token_mismatch_mean_abs": 0.5, "token_mismatch_max_abs": 3, "token_mismatch_mean": 0.5,
        "token_mismatch_tolerance": 1, "token_mismatch_threshold": 0.01})
    page = render(exp, tmp_path / "r.html", static_figures=False).read_text()
    first = page.split("</h1>", 1)[1].split("<nav", 1)[0]
    # one sign, half a token a request: systematic (a BOS counted, another tokenizer): on the first screen
    assert f"token counts differ systematically in 1 of {len(dirs)} runs: server - client +0.50 a request" in first
    assert "25.0% of 20 requests differ" in first
    # both ways (a random-weight model): every row took the server's count, so it is a detail, with the provenance
    write_json(dirs[0] / "summary.json", read_json(dirs[0] / "summary.json") | {"token_mismatch_mean": 0.05})
    page = render(exp, tmp_path / "r2.html", static_figures=False).read_text()
    first = page.split("</h1>", 1)[1].split("<nav", 1)[0]
    prov = page.split("id='sec-provenance'", 1)[1]
    assert "token counts" not in first and (
        f"token counts: the client&#x27;s re-tokenization differs from the server&#x27;s usage in 1 of {len(dirs)} "
        "runs (up to 25% of requests, both ways)") in prov
    assert "TTFT against the cached share of the prompt" in page
