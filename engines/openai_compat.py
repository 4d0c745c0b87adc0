"""Any OpenAI-compatible endpoint that is already running (not launched by us)."""

from __future__ import annotations

import json

from engines.base import EngineAdapter, http_get


class OpenAICompatible(EngineAdapter):
    name = "openai"
    health_path = "/v1/models"

    @property
    def launched(self) -> bool:
        return False

    def _headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def health_ok(self) -> bool:
        try:
            status, _ = http_get(self.base_url + self.health_path, timeout=5, headers=self._headers())
            return status == 200
        except OSError:
            return False

    def provenance(self) -> dict:
        p = super().provenance()
        for path, key in (("/v1/models", "v1_models"), ("/version", "version_endpoint")):
            try:
                status, body = http_get(self.base_url + path, timeout=5, headers=self._headers())
                if status == 200:
                    p[key] = json.loads(body)
            except (OSError, ValueError):
                pass
        v = p.get("version_endpoint")
        if isinstance(v, dict) and v.get("version"):
            p["engine_version"] = v["version"]
        return p
