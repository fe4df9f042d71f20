"""Loading models: registry names, Hugging Face directories and hub ids, GGUF files.

    from specjax.loading import load_model
    model = load_model("smollm2-135m")          # embedded SmolLM2-135M-Instruct GGUF
    ids = model.encode("Hi!", chat=True)
    logits = model.logits([ids])                # [1, T, V] float32

Modules: `model` (Model, load_model), `hf` (config.json + safetensors), `gguf_file`
(GGUF read + dequantize), `tokenizer` (tokenizers and stop ids), `hub` (snapshot
resolution), `registry` (named models), `asset` (the shipped draft format and the
specjax cache), `hf_export` (Hugging Face directories out). Never imports training.
"""
from specjax.errors import LoadError
from specjax.loading.model import Model, load_model, resolve
from specjax.loading.registry import REGISTRY, register

__all__ = ["LoadError", "Model", "load_model", "resolve", "REGISTRY", "register"]
