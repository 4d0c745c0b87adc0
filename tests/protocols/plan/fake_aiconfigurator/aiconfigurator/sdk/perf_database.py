_DATABASES = {"h200_sxm": {"vllm": ["0.24.0", "0.27.0"], "sglang": ["0.5.14"]},
              "h100_sxm": {"vllm": ["0.24.0"]}, "l40s": {"vllm": ["0.24.0"]}}


def get_supported_databases():
    return _DATABASES


def get_latest_database_version(system, backend):
    versions = _DATABASES.get(system, {}).get(backend)
    return versions[0] if versions else None
