class EstimateResult:
    def __init__(self, raw, kv_cache_warning=None):
        self.raw = raw
        self.kv_cache_warning = kv_cache_warning

    def get(self):
        return dict(self.raw)


def cli_estimate(model_path, system_name, *, mode="agg", backend_name="trtllm", backend_version=None,
                 isl=1024, osl=1024, batch_size=128, tp_size=1, pp_size=1, decode_batch_size=None,
                 decode_num_workers=None, prefill_batch_size=None, prefill_num_workers=None, **kwargs):
    batch = batch_size if mode == "agg" else decode_batch_size
    if batch > 1000:
        raise RuntimeError(f"OOM: the model '{model_path}' does not fit in GPU memory on system '{system_name}'")
    if model_path == "fake/Impossible-8B":
        ttft, tpot = 0.001, 0.0001
    else:
        ttft = 20.0 + 0.5 * batch if mode == "agg" else 20.0
        tpot = 4.0 + 0.05 * batch
    latency = ttft + tpot * (osl - 1)
    concurrency = batch if mode == "agg" else batch * decode_num_workers
    row = {"model": model_path, "isl": isl, "osl": osl, "concurrency": concurrency, "ttft": ttft, "tpot": tpot,
           "request_latency": latency, "seq/s": concurrency / latency * 1e3,
           "tokens/s": concurrency / latency * 1e3 * osl, "backend": backend_name, "version": backend_version,
           "system": system_name}
    if mode == "agg":
        row.update({"bs": batch, "tp": tp_size, "pp": pp_size, "gemm": "bfloat16", "kvcache": "bfloat16",
                    "num_total_gpus": tp_size * pp_size})
    else:
        row.update({"(p)bs": prefill_batch_size, "(p)workers": prefill_num_workers, "(d)bs": batch,
                    "(d)workers": decode_num_workers, "(p)gemm": "bfloat16", "(d)gemm": "bfloat16",
                    "(p)kvcache": "bfloat16", "(d)kvcache": "bfloat16"})
    return EstimateResult(row)
