"""What the user typed is what runs: overrides that another setting would silently overrule.

Given the keys set explicitly on the command line, ``apply_explicit`` either honours them or
stops with a message saying what overrules them and what to type instead.  Only explicit
keys count: a default that another default makes moot is no one's mistake.

- ``load.rate`` or ``load.concurrency`` with the protocol's default sweep: that one point
  runs (the sweep's own points would have replaced the value); ``protocol.load_points=[...]``
  sweeps.
- ``load.rate`` / ``load.concurrency`` with explicit ``protocol.load_points`` that set the
  same key: an error (each point replaces it).
- a load key the chosen arrival process does not use (``rate`` with ``load=concurrency`` or
  ``load=trace``, ``concurrency`` or ``burstiness`` with another process, ``max_concurrency``
  with a closed loop, ``drain_timeout_s`` without ``duration_s``): an error.
- ``workload.time_scale`` with ``workload.target_rate``: an error (the target rate rescales
  whatever the scale did).
- ``engine.*`` settings that build the launch command together with ``engine.command``
  (which replaces it), or launch settings for an endpoint that is not launched: an error.
"""

from __future__ import annotations

from omegaconf import DictConfig

from conf.schema import ConfigError

# Engine keys that only shape the command tokenfactory builds (engine.command replaces it).
_BUILT_COMMAND = ("features", "max_model_len", "served_model_name", "revision", "seed", "device")
# Engine keys that only matter when tokenfactory launches the engine.
_LAUNCH_ONLY = ("python", "command", "extra_args", "env", "features", "device", "revision", "seed")
_CLOSED_LOOP = ("concurrency",)


def explicit_keys(task_overrides: list[str]) -> frozenset[str]:
    """``['load.rate=20', '+x.y=1', 'engine=vllm']`` -> ``{'load.rate', 'x.y', 'engine'}``."""
    keys = set()
    for o in task_overrides:
        if "=" in o:
            keys.add(o.split("=", 1)[0].lstrip("+~"))
    return frozenset(keys)


def _given(explicit: frozenset[str], key: str) -> bool:
    """``key`` or one of its children was set explicitly (``engine.features`` <- ``engine.features.x``)."""
    return key in explicit or any(k.startswith(key + ".") for k in explicit)


def apply_explicit(cfg: DictConfig, explicit: frozenset[str]) -> list[str]:
    """Honour the explicit overrides (see module doc); returns notes to print, raises
    ``ConfigError`` for one that would be overruled."""
    notes: list[str] = []
    load, kind = cfg.load, cfg.load.kind
    points = list(cfg.protocol.load_points)
    for key in ("rate", "concurrency"):
        full = f"load.{key}"
        if full not in explicit:
            continue
        if key == "rate" and kind in ("concurrency", "trace"):
            instead = ("load.concurrency" if kind == "concurrency"
                       else "workload.time_scale or workload.target_rate")
            raise ConfigError(f"{full}={load[key]} has no effect with load={kind}; use {instead}")
        if key == "concurrency" and kind not in _CLOSED_LOOP:
            raise ConfigError(f"{full}={load[key]} has no effect with load={kind} (an open loop); use "
                              "load=concurrency for a closed loop, or load.max_concurrency to cap requests in flight")
        sets_it = [p for p in points if not isinstance(p, DictConfig) or key in p]
        if not points or not sets_it:
            continue
        if "protocol.load_points" in explicit:
            raise ConfigError(f"{full}={load[key]} is replaced by every point of protocol.load_points="
                              f"{_show(points)}; give one or the other")
        cfg.protocol.load_points = []
        notes.append(f"{full}={load[key]} given: running that one load point, not the sweep's "
                     f"{_show(points)} (protocol.load_points=[...] sweeps)")
    checks = [
        ("load.burstiness", kind != "gamma",
         f"load.burstiness shapes gamma arrivals only (load=gamma), not load={kind}"),
        ("load.max_concurrency", kind in _CLOSED_LOOP,
         "load.max_concurrency caps an open loop; a closed loop has load.concurrency users"),
        ("load.drain_timeout_s", load.duration_s is None,
         "load.drain_timeout_s bounds the drain after load.duration_s, which is not set (with load.num_requests "
         "every request is waited for, up to client.timeouts)"),
    ]
    for key, moot, why in checks:
        if key in explicit and moot:
            raise ConfigError(f"{key}={cfg.load[key.split('.')[1]]}: {why}")
    wl = cfg.workload
    if "workload.time_scale" in explicit and "workload.target_rate" in explicit:
        raise ConfigError(f"workload.time_scale={wl.time_scale} is overruled by workload.target_rate={wl.target_rate}, "
                          "which rescales the trace to that mean rate whatever the scale; give one or the other")
    eng = cfg.engine
    if eng.command:
        moot = [f"engine.{k}" for k in _BUILT_COMMAND if _given(explicit, f"engine.{k}")]
        if moot:
            raise ConfigError(f"{', '.join(moot)} only shape the command tokenfactory builds, and engine.command "
                              "replaces it: put those flags in engine.command (or engine.extra_args)")
    if not eng.launch:
        moot = [f"engine.{k}" for k in _LAUNCH_ONLY if _given(explicit, f"engine.{k}")]
        if moot:
            raise ConfigError(f"{', '.join(moot)}: engine={eng.name} with launch=false is an endpoint tokenfactory "
                              "does not start, so launch settings do not reach it")
    return notes


def _show(points) -> str:
    return "[" + ", ".join(str(p) for p in points) + "]"
