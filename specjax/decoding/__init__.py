"""Autoregressive and speculative decoding: drafters, verifier, loop, statistics."""
from specjax.decoding.drafters import (Drafter, EarlyExitDrafter, LookupFirstDrafter,
                                      ModelDrafter, NgramDrafter, NoDrafter)
from specjax.decoding.generate import GenerationResult, generate
from specjax.decoding.stats import SpecStats, expected_tokens_per_pass
from specjax.decoding.verify import verify_batch, verify_row

__all__ = ["Drafter", "NoDrafter", "EarlyExitDrafter", "ModelDrafter", "NgramDrafter",
           "LookupFirstDrafter",
           "GenerationResult", "generate", "SpecStats", "expected_tokens_per_pass",
           "verify_batch", "verify_row"]
