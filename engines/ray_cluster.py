"""Joining the Ray cluster that the load generator's workers (client.backend=ray) and a
deployment's replicas (deployment.backend=ray) share: once per process."""

from __future__ import annotations


def connect(address: str | None, runtime_env: dict | None = None, key: str = "client.ray.address") -> None:
    """Join the cluster at ``address`` (or, with none and no ``RAY_ADDRESS``, start a local
    one); a failure is a ValueError naming ``key``, the field the address came from."""
    import ray

    if ray.is_initialized():
        return
    kw = {"runtime_env": runtime_env} if runtime_env else {}
    try:
        ray.init(address=address, log_to_driver=False, **kw)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise ValueError(f"{key}={address!r}: cannot join the Ray cluster: {e}") from None
