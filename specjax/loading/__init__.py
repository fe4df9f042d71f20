"""Loading models: registry names, Hugging Face directories and hub ids, GGUF files.

    from specjax.loading import load_model
    model = load_model("smollm2-135m")          # embedded SmolLM2-135M-Instruct GGUF
    ids = model.encode("Hi!", chat=True)
    logits = model.logits([ids])                # [1, T, V] float32

Modules: `load` (load_model, resolve: the one module that ties the others together),
`model` (Model), `registry` (named models -> where their files are), `hf` (config.json +
safetensors), `gguf_file` (GGUF read + dequantize), `tokenizer` (tokenizers and stop
ids), `hub` (snapshot resolution), `asset` (the shipped draft format), `hf_export`
(Hugging Face directories out). Imports `models` and `parallel`; never decoding,
training or bench.
"""
from specjax.errors import LoadError
from specjax.loading.load import load_model, resolve
from specjax.loading.model import Model
from specjax.loading.registry import REGISTRY, register

__all__ = ["LoadError", "Model", "load_model", "resolve", "REGISTRY", "register"]
