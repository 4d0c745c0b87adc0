"""What the streaming client is told: where to send, how to word requests, its time limits."""

from __future__ import annotations

from dataclasses import dataclass, field

from conf.schema import ClientTimeouts


@dataclass
class ClientConfig:
    base_url: str
    model: str
    api: str = "completions"          # completions | chat
    api_key: str | None = None
    timeouts: ClientTimeouts = field(default_factory=ClientTimeouts)  # client.timeouts (conf/schema.py), typed
    extra_body: dict = field(default_factory=dict)  # the engine's dialect: ignore_eos, min_tokens, ...
    continuous_usage: bool = False
    exact_output: bool = True         # a min_tokens in extra_body is set to each request's max_tokens
    kernel_timestamps: bool = True    # chunk times from the kernel's receive stamps where available
    idle_close_s: float | None = 30.0  # pooled connections idle this long, above the prewarmed count, are closed
    # Which replica of a deployment served each response: the value of this response header
    # (None: not read), renamed by replica_names (header value -> replica name, e.g. a worker's
    # URL -> r1; a value it does not map is kept as it is); default_replica when the response
    # names none (a single engine: r0).
    replica_header: str | None = "x-tokenfactory-replica"
    replica_names: dict[str, str] = field(default_factory=dict)
    default_replica: str = "unknown"

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.api == "chat" else "/v1/completions"

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + self.path
