# Llama-3-8B's shape (the keys a Hugging Face config.json has)
LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "intermediate_size": 14336, "vocab_size": 128256, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16"}


def get_model_config_from_model_path(model_path):
    return {"architecture": "LlamaForCausalLM", "raw_config": dict(LLAMA_8B)}
