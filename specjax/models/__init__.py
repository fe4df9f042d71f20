"""Decoder families, static config and the KV cache."""
from specjax.models.cache import KVCache
from specjax.models.config import ModelConfig
from specjax.models.params import init_params
from specjax.models.feature_draft import feature_forward, is_feature_draft
from specjax.models.transformer import forward, forward_hidden, head

__all__ = ["KVCache", "ModelConfig", "init_params", "forward", "forward_hidden", "head",
           "feature_forward", "is_feature_draft"]
