"""Any OpenAI-compatible endpoint that is already running (not launched by us)."""

from __future__ import annotations

from engines.base import EngineAdapter


class OpenAICompatible(EngineAdapter):
    name = "openai"
    health_path = "/v1/models"

    @property
    def launched(self) -> bool:
        return False

    def provenance(self) -> dict:
        p = super().provenance()
        v = self.get_json("/version")
        if v is not None:
            p["version_endpoint"] = v
        if isinstance(v, dict) and v.get("version"):
            p["engine_version"] = v["version"]
        return p
