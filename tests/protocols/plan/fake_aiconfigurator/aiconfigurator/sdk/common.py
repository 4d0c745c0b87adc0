DefaultHFModels = {"meta-llama/Meta-Llama-3.1-8B", "Qwen/Qwen3-8B", "fake/Impossible-8B"}
