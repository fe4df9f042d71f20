"""Drafters: one module a kind, each declaring its `Capabilities` (`base.py`).

A new kind is a module here and one registration in the draft-spec grammar
(`specjax.api.draft_spec`); `docs/extending.md` walks through it.
"""
from specjax.decoding.drafters.base import (Capabilities, ChainDrafter, DraftContext, Drafter,
                                            DrafterBase, NoDrafter, PassDrafter, SpecError,
                                            TreeDrafter, sample_chain)
from specjax.decoding.drafters.eagle3 import Eagle3Drafter, Eagle3State
from specjax.decoding.drafters.dflash import DFlashDrafter, DFlashState
from specjax.decoding.drafters.early_exit import EarlyExitDrafter
from specjax.decoding.drafters.feature import FeatureDrafter, FeatureDraftState
from specjax.decoding.drafters.lookahead import LookaheadDrafter
from specjax.decoding.drafters.lookup_first import LookupFirstDrafter, LookupTree
from specjax.decoding.drafters.medusa import MedusaDrafter
from specjax.decoding.drafters.model import ModelDrafter, draft_autoregressive
from specjax.decoding.drafters.peagle import PEagleDrafter
from specjax.decoding.drafters.ngram import NgramDrafter, best_match, ngram_matches

__all__ = ["Capabilities", "ChainDrafter", "DraftContext", "Drafter", "DrafterBase", "NoDrafter",
           "PassDrafter", "SpecError", "TreeDrafter", "sample_chain", "Eagle3Drafter", "Eagle3State", "EarlyExitDrafter", "FeatureDrafter",
           "FeatureDraftState", "LookaheadDrafter", "LookupFirstDrafter", "LookupTree",
           "MedusaDrafter", "ModelDrafter", "draft_autoregressive", "NgramDrafter", "best_match",
           "ngram_matches", "DFlashDrafter", "DFlashState",
           "PEagleDrafter"]
