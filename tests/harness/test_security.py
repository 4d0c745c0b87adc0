"""Security (issue 17, item 6): keys, TLS, YAML, engine commands, names that become paths.

- An API key reaches no file, log, MLflow store or report, also when a server echoes it back
  (a 401 body, an error event, a 500 page dumping the request) and after ``mlflow-sync``.
- TLS verification is on by default; an untrusted certificate is a clear ``connection_error``.
- YAML is only ever loaded safely (no ``!!python/...`` tag is constructed), in the code and
  in practice (a results folder's ``config.yaml`` carrying one).
- Engines are launched from argument lists: no shell anywhere, a string command refused, shell
  syntax in an argument stays a literal argument.
- Names from configs, traces and servers (experiment and config names, load points, session
  ids, prefix groups, model names, response ids) cannot write outside ``output_dir``.  (That
  they cannot inject into the report's HTML is tested with the report.)
- The promotion proxy binds to loopback unless told otherwise.
"""

from __future__ import annotations

import ast
import os
import shutil
import ssl
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from tests.fake_server import END, HEAD_CHUNKED, FakeServer, chunk, completion, event

pytestmark = pytest.mark.faults
REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-test-ECHOED-BACK-0987654321"
PACKAGES = ("harness", "engines", "loadgen", "metrics", "protocols", "conf", "benchmarks")


def _sources():
    for pkg in PACKAGES:
        yield from (REPO / pkg).rglob("*.py")


# ----------------------------------------------------------------------------------- API keys
def _echoing(body, k):
    """Request 0 (the engine's warm-up probe) and every 4th: a stream; the others give the key back."""
    if k % 4 == 0:
        text = b"".join(event(completion(f"s-{k}", f"t{i} ")) for i in range(3))
        return [HEAD_CHUNKED, chunk(text + event(completion(f"s-{k}", "", "length", usage={
            "prompt_tokens": 7, "completion_tokens": 3})) + event(b"[DONE]")) + END]
    if k % 4 == 1:
        msg = orjson.dumps({"error": f"invalid api key {SECRET}"})
        return [b"HTTP/1.1 401 Unauthorized\r\nContent-Length: %d\r\n\r\n%s" % (len(msg), msg)]
    if k % 4 == 2:
        return [HEAD_CHUNKED, chunk(event({"error": {"message": f"key {SECRET} has no quota"}})) + END]
    page = f"<pre>POST /v1/completions\nAuthorization: Bearer {SECRET}\n</pre>".encode()
    return [b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s"
            % (len(page), page)]


def _trace(path: Path) -> None:
    """A JSON-lines trace whose names try to be paths."""
    lines = [{"timestamp": i * 0.05, "input_tokens": 20, "output_tokens": 3,
              "session_id": ["../../escape", "/etc/passwd", "a/../../b"][i % 3], "turn": i // 3}
             for i in range(9)]
    lines += [{"timestamp": 1.0 + 0.05 * i, "input_tokens": 30, "output_tokens": 3, "prefix_group": "../../grp",
               "prefix_tokens": 10} for i in range(8)]
    path.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n")


def test_a_key_the_server_echoes_reaches_no_file_log_mlflow_or_report(tmp_path, _mlflow_template):
    from engines.tiny_model import ensure_tiny_model

    work = tmp_path / "work"
    work.mkdir()
    _trace(work / "trace.jsonl")
    for store in ("mlflow.db", "later.db"):  # empty stores with their tables: creating them costs seconds a store
        shutil.copy(_mlflow_template, work / store)
    before = sorted(p.name for p in tmp_path.iterdir())
    env = {**os.environ, "PYTHONPATH": str(REPO), "MY_KEY": SECRET,
           "MLFLOW_TRACKING_URI": f"sqlite:///{work}/mlflow.db"}
    with FakeServer(_echoing, process=True) as srv:
        p = subprocess.run(
            [sys.executable, "-m", "harness.cli", "run", "engine=openai", f"engine.base_url={srv.url}",
             "engine.model=../../model", f"engine.tokenizer={ensure_tiny_model()}", "engine.api_key_env=MY_KEY",
             "workload=jsonl", f"workload.path={work / 'trace.jsonl'}", "load=trace", "protocol.load_points=[]",
             f"output_dir={work / 'out'}", "progress=false", "experiment=sec"],
            capture_output=True, text=True, timeout=600, cwd=work, env=env)
        headers_seen = srv.requests
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert len(headers_seen) >= 8
    import pyarrow.parquet as pq

    t = pq.read_table(work / "out" / "requests.parquet")
    statuses = t.column("status").to_pylist()
    assert "ok" in statuses and "http_error" in statuses and "invalid_response" in statuses
    assert any("***redacted***" in (e or "") for e in t.column("error").to_pylist())
    # afterwards, into another MLflow store too
    s = subprocess.run([sys.executable, "-m", "harness.cli", "mlflow-sync", str(work / "out"), "--tracking-uri",
                        f"sqlite:///{work}/later.db"], capture_output=True, text=True, timeout=300, cwd=work, env=env)
    assert s.returncode == 0, s.stdout + s.stderr
    # nothing anywhere: run files, both MLflow stores and their artifacts, the report, the logs
    assert (work / "out" / "report.html").exists()
    for f in work.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f
    for text in (p.stdout, p.stderr, s.stdout, s.stderr):
        assert SECRET not in text
    # and no name from the trace or the server made a folder outside output_dir
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert {p.name for p in work.iterdir()} <= {"trace.jsonl", "mlflow.db", "later.db", "mlartifacts", "out",
                                                "results"}  # (results/.hydra: Hydra's own log of the command)


def test_a_key_on_the_command_line_reaches_no_hydra_file_or_log(tmp_path):
    """Hydra writes every override to ``.hydra/overrides.yaml`` and its saved config (and a
    multirun prints each job's): a key given as ``engine.api_key=`` must never get that far."""
    from harness.commands.run import keys_to_env

    env_before = dict(os.environ)
    try:
        assert keys_to_env(["engine=openai", f"engine.api_key={SECRET}", "+proxy.api_key=x", "engine.api_key=null",
                             "x.api_key_env=V"]) == [
            "engine=openai", "engine.api_key_env=TOKENFACTORY_ENGINE_API_KEY",
            "+proxy.api_key_env=TOKENFACTORY_PROXY_API_KEY", "engine.api_key=null", "x.api_key_env=V"]
        assert os.environ["TOKENFACTORY_ENGINE_API_KEY"] == SECRET
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    for multirun in ([], ["-m", "seed=1,2"]):
        p = subprocess.run([sys.executable, "-m", "harness.cli", "run", *multirun, "engine=openai", "engine.base_url=http://127.0.0.1:9",
                            "engine.model=m", f"engine.api_key={SECRET}", f"output_dir={tmp_path / 'out'}",
                            "--dry-run"],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        assert SECRET not in p.stdout + p.stderr
    written = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert any(f.name == "overrides.yaml" for f in written)
    for f in written:
        assert SECRET.encode() not in f.read_bytes(), f


def test_mlflow_warning_does_not_show_uri_credentials():
    from harness.mlflow_log import shown_uri

    assert shown_uri("https://me:tok3n@mlflow.example:5000/x") == "https://mlflow.example:5000/x"
    assert shown_uri("sqlite:///results/mlflow.db") == "sqlite:///results/mlflow.db"


# ----------------------------------------------------------------------------------- TLS
def test_tls_verification_is_on_by_default():
    from loadgen.client import ClientConfig, StreamingClient
    from loadgen.client.stamped_socket import kernel_stamps_supported

    c = StreamingClient(ClientConfig(base_url="https://127.0.0.1:1", model="m"))
    if kernel_stamps_supported():
        assert c._ssl_context.verify_mode == ssl.CERT_REQUIRED and c._ssl_context.check_hostname
    # the engine helpers (health, /metrics, warm-up) use urllib's default context: verifying too
    src = (REPO / "engines" / "http.py").read_text()
    assert "CERT_NONE" not in src and "_create_unverified_context" not in src and "check_hostname = False" not in src


def test_untrusted_certificate_is_a_clear_connection_error(tmp_path, monkeypatch):
    if not _openssl():
        pytest.skip("no openssl binary to make a certificate")
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    import asyncio

    from loadgen.client import ClientConfig, StreamingClient
    from loadgen.records import RequestRecord

    def script(req, k):
        return [HEAD_CHUNKED, chunk(event(completion("s", "a", "length"))) + END]

    with FakeServer(script, ssl_context=ctx) as srv:
        async def go():
            async with StreamingClient(ClientConfig(base_url=srv.url, model="m")) as c:
                return await c.send(RequestRecord(request_id="r", scheduled_ns=0), c.body("hi", 1))

        rec = asyncio.run(go())
    assert rec.status == "connection_error" and "CERTIFICATE_VERIFY_FAILED" in rec.error
    assert rec.chunk_ns == [] and srv.requests == []  # nothing was sent over the untrusted connection


def _openssl() -> bool:
    from shutil import which

    return which("openssl") is not None


# ----------------------------------------------------------------------------------- YAML
def test_yaml_is_only_loaded_safely_in_the_code():
    bad = []
    for f in _sources():
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                name = node.func.attr
                if name in ("unsafe_load", "full_load", "unsafe_load_all", "full_load_all"):
                    bad.append(f"{f}:{node.lineno}: yaml.{name}")
                if name in ("load", "load_all") and isinstance(node.func.value, ast.Name) and \
                        node.func.value.id == "yaml":
                    loader = [k for k in node.keywords if k.arg == "Loader"]
                    if not loader or "Safe" not in ast.unparse(loader[0].value):
                        bad.append(f"{f}:{node.lineno}: yaml.{name} without a SafeLoader")
    assert bad == []


def test_a_python_tag_in_a_results_config_is_not_constructed(tmp_path):
    """The one reader of run folders (harness.results_io) loads YAML safely: a python tag is an
    error naming the file, and nothing it names runs."""
    from harness.results_io import CONFIG, ResultsFileError, read_yaml

    marker = tmp_path / "constructed"
    (tmp_path / CONFIG).write_text(f"experiment: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ResultsFileError, match=str(tmp_path / CONFIG)):
        read_yaml(tmp_path / CONFIG, {})
    assert not marker.exists()


# ----------------------------------------------------------------------------------- engine commands
def test_no_shell_anywhere():
    bad = []
    for f in _sources():
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if not isinstance(node, ast.Call):
                continue
            fn = ast.unparse(node.func)
            if fn in ("os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput"):
                bad.append(f"{f}:{node.lineno}: {fn}")
            for k in node.keywords:
                if k.arg == "shell" and not (isinstance(k.value, ast.Constant) and k.value.value is False):
                    bad.append(f"{f}:{node.lineno}: {fn}(shell=...)")
    assert bad == []


def test_engine_commands_are_argument_lists(tmp_path):
    from engines.process import EngineProcess

    with pytest.raises(TypeError, match="argument lists"):
        EngineProcess("python -m vllm.entrypoints.openai.api_server", tmp_path / "engine.log")
    marker = tmp_path / "injected"
    p = EngineProcess([sys.executable, "-c", "import sys; print(sys.argv[1:])", f"; touch {marker}",
                       f"$(touch {marker})", f"`touch {marker}`"], tmp_path / "engine.log")
    p.start()
    deadline = time.monotonic() + 60
    while p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p.poll() == 0 and not marker.exists()
    assert f"$(touch {marker})" in (tmp_path / "engine.log").read_text()  # one literal argument


def test_extra_args_stay_literal_arguments_in_the_built_command(tmp_path):
    from omegaconf import OmegaConf

    from conf.compose import compose_config

    cfg = compose_config(["engine=vllm", "engine.python=/usr/bin/python3", "engine.model=/models/m",
                          "engine.extra_args=['--served-model-name', '$(reboot); rm -rf /']"])
    from engines.registry import make_engine

    argv = make_engine(cfg.engine, tmp_path).full_command()
    assert isinstance(argv, list) and "$(reboot); rm -rf /" in argv
    assert OmegaConf.select(cfg, "engine.extra_args")[1] == "$(reboot); rm -rf /"


# ----------------------------------------------------------------------------------- names -> paths
@pytest.mark.parametrize("name", ["../../x", "/abs", "a/b", "..", ".hidden", "a\x00b", ""])
def test_comparison_and_ablation_names_cannot_be_paths(name):
    from omegaconf import OmegaConf

    from protocols.ablation.plan import ablation_arms
    from protocols.compare.plan import named_configs

    with pytest.raises(ValueError, match=r"protocol\.configs"):
        named_configs(OmegaConf.create({"configs": {name: ["engine.features.max_num_seqs=4"], "b": []}}))
    with pytest.raises(ValueError, match=r"protocol\.optimisations"):
        ablation_arms(OmegaConf.create({"optimisations": {name: ["engine.features.max_num_seqs=4"]},
                                        "combinations": "factorial", "pairs": None}))


@pytest.mark.parametrize("name", ["../../x", "/abs", "a/../../b", "..\\..\\x", ""])
def test_the_experiment_name_cannot_leave_results(name):
    from conf.compose import compose_config
    from conf.schema import ConfigError, validate

    with pytest.raises(ConfigError, match="experiment="):
        validate(compose_config([f"experiment='{name}'"]))


def test_load_point_labels_stay_one_folder_each():
    from protocols.sweep.load_points import runs_from_points

    base = {"kind": "poisson", "rate": None, "concurrency": None, "num_requests": 5}
    for value in ("../../x", "/etc/passwd", "a/b", "..", "x\x00y"):
        for spec in runs_from_points(base, [{"rate": value}, {"concurrency": value}]):
            assert "/" not in spec.subdir and "\\" not in spec.subdir and "\x00" not in spec.subdir
            assert spec.subdir not in (".", "..") and spec.subdir[:2].isdigit()


def test_multirun_job_folders_are_one_safe_name():
    import re

    from harness import multirun

    src = Path(multirun.__file__).read_text()
    # job folders: "job<N>-" and the swept overrides with every other character replaced
    assert re.search(r'f"job\{hc\.job\.num\}-"', src) and 'c.isalnum() or c in "._=,-"' in src


# ----------------------------------------------------------------------------------- the proxy
def test_the_proxy_binds_to_loopback_unless_told_otherwise():
    from conf.schema import Proxy

    assert Proxy().host == "127.0.0.1"
