"""How a deployment's replicas are made and launched: each an adapter of ``engines/`` under its
own name and log (``make_replica``), given its address in its slot, the flags that name it and
join it to the router and its pool, its environment and its launcher (``prepare_replica``), and
all started at once (``start_replicas``)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from engines.base import EngineAdapter
from engines.errors import EngineError
from engines.registry import make_engine

PLUGINS = Path(__file__).parent / "server_plugins"  # imported by the engine's own interpreter


def make_replica(engine_cfg, run_dir: Path, name: str) -> EngineAdapter:
    """An adapter for ``engine_cfg`` as replica ``name`` (its log ``engine-<name>.log``)."""
    eng = make_engine(engine_cfg, run_dir)
    eng.replica = name
    eng.log_name = f"engine-{name}.log"
    return eng


def prepare_replica(eng: EngineAdapter, slot, placer, router, dep) -> None:
    """One replica's address (reserved in its slot by ``placer``), flags (its name header, the
    router's worker flags, its pool's), environment and launcher; ``dep``: the deployment's
    typed config."""
    eng.check_features()
    host, port = placer.reserve(slot, eng.host)
    eng.host, eng.port = host, port
    args = list(eng.replica_tag_flags()) + router.worker_flags(eng.name)
    if slot.role in ("prefill", "decode"):
        args += eng.disaggregation_flags(slot.role, dep, bootstrap_port(slot, eng.name))
        args += list(dep.prefill_args if slot.role == "prefill" else dep.decode_args)
    eng.replica_args = args
    eng.replica_env = {"TOKENFACTORY_REPLICA": slot.name,
                       "TOKENFACTORY_REPLICA_HEADER": dep.replica_header,
                       "PYTHONPATH": _prepend_path(str(PLUGINS), eng.launch_env().get("PYTHONPATH")
                                                   or os.environ.get("PYTHONPATH")),
                       **eng.placement_env(slot.cpus, slot.devices)}
    eng.spawn = (lambda argv, log, env, slot=slot: placer.launch(slot, argv, env, log))
    eng.prepare()


def bootstrap_port(slot, engine_name: str) -> int | None:
    """A prefill replica's KV bootstrap port (SGLang's ``--disaggregation-bootstrap-port``)."""
    if slot.role != "prefill" or engine_name != "sglang":
        return None
    if not hasattr(slot, "bootstrap_port"):
        from engines.process import free_port

        slot.bootstrap_port = free_port(slot.host or "127.0.0.1")
    return slot.bootstrap_port


def start_replicas(replicas: list[EngineAdapter], warm_up: bool) -> list[BaseException]:
    """Every replica at once, each waiting for its own health (and warm-up, ``warm_up``); returns
    once all have finished, with the errors of those that failed, each naming its replica."""
    errors: list[BaseException] = []

    def start_one(eng: EngineAdapter) -> None:
        try:
            eng.start(warm_up=warm_up)
        except BaseException as e:  # noqa: BLE001 - returned, with the replica's name
            errors.append(EngineError(f"replica {eng.replica}: {e}"))

    threads = [threading.Thread(target=start_one, args=(eng,), name=f"start-{eng.replica}") for eng in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _prepend_path(first: str, rest: str | None) -> str:
    return first if not rest else f"{first}:{rest}"
