"""How a request is worded for the engine: the OpenAI route's JSON body and the engine's
own fields (``ignore_eos``, ``min_tokens``, ``stream_options.continuous_usage_stats``).

Engines differ in what they accept (``transformers serve`` answers HTTP 422 to fields it
does not know); the adapter says which fields to send (``engines``' ``dialect()``), and
this module only writes them.
"""

from __future__ import annotations

import orjson

from loadgen.client.config import ClientConfig


class RequestDialect:
    """Encodes request bodies for one ``ClientConfig``: ``body(prompt, max_tokens) -> bytes``."""

    def __init__(self, cfg: ClientConfig):
        self.cfg = cfg
        stream_options = {"include_usage": True}
        if cfg.continuous_usage:
            stream_options["continuous_usage_stats"] = True
        self._base = {"model": cfg.model, "stream": True, "stream_options": stream_options, **cfg.extra_body}
        self._chat = cfg.api == "chat"
        # min_tokens = max_tokens makes every output exactly max_tokens long where the engine takes it
        self._min_tokens = cfg.exact_output and "min_tokens" in cfg.extra_body

    def body(self, prompt, max_tokens: int, model: str | None = None) -> bytes:
        """The JSON body for one prompt (text for /v1/completions, text or messages for chat);
        ``model``: a LoRA adapter's name instead of the configured model."""
        b = dict(self._base)
        if model is not None:
            b["model"] = model
        if self._chat:
            b["messages"] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        else:
            b["prompt"] = prompt
        b["max_tokens"] = int(max_tokens)
        if self._min_tokens:
            b["min_tokens"] = int(max_tokens)
        return orjson.dumps(b)
