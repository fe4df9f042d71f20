"""Decoder families, static config and the KV cache."""
from specjax.models.cache import KVCache
from specjax.models.config import ModelConfig
from specjax.models.params import init_params
from specjax.models.transformer import forward, forward_hidden, head

__all__ = ["KVCache", "ModelConfig", "init_params", "forward", "forward_hidden", "head"]
