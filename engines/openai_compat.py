"""Any OpenAI-compatible endpoint that is already running (not launched by us)."""

from __future__ import annotations


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
        v = self.get_json("/version")
        if v is not None:
            p["version_endpoint"] = v
        if isinstance(v, dict) and v.get("version"):
            p["engine_version"] = v["version"]
        return p
