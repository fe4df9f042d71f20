"""Decoding: drafters, the round kinds, the verifier, the loop, statistics.

Imports `models`, `sampling` and `parallel` only (tests/test_layering.py holds it to that).
"""
from specjax.decoding.drafters import (Capabilities, Drafter, EarlyExitDrafter, FeatureDrafter,
                                      LookaheadDrafter, LookupFirstDrafter, MedusaDrafter,
                                      ModelDrafter, NgramDrafter, NoDrafter)
from specjax.decoding.generate import GenerationResult, generate
from specjax.decoding.stats import SpecStats, expected_tokens_per_pass
from specjax.decoding.verify import verify_batch, verify_row

__all__ = ["Capabilities", "Drafter", "NoDrafter", "EarlyExitDrafter", "FeatureDrafter",
           "LookaheadDrafter", "LookupFirstDrafter", "MedusaDrafter", "ModelDrafter",
           "NgramDrafter", "GenerationResult", "generate", "SpecStats",
           "expected_tokens_per_pass", "verify_batch", "verify_row"]
