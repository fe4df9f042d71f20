"""specjax: pure-functional JAX speculative decoding.

    model = specjax.load_model("smollm2-135m")
    out = specjax.generate(model, "Rewrite: ...", 64, draft="ngram:3", k=4)
"""
from specjax.models import ModelConfig
from specjax.sampling import SamplingParams, warp

__all__ = ["generate", "load_model", "Model", "ModelConfig", "SamplingParams", "warp"]


def __getattr__(name):  # the API and loaders pull in transformers/gguf: import on first use
  if name == "generate":
    from specjax.api import generate
    return generate
  if name in ("load_model", "Model"):
    from specjax import loading
    return getattr(loading, name)
  raise AttributeError(f"module 'specjax' has no attribute {name!r}")
