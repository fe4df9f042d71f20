"""Main job: the embedded SmolLM2-135M target with the project's best drafter.

    python scripts/speculate.py
    python scripts/speculate.py --config.draft=ngram:3 --config.k=6 --config.max_new_tokens=96
    python scripts/speculate.py --config.tree=dynamic:16 --config.k=4   # a token tree of depth 4
    python scripts/speculate.py --json_out=/tmp/card.json
    python scripts/speculate.py --config.mesh=1,8 --config.dtype=bfloat16   # 8 accelerators
"""
import ml_collections

from configs import common

DEFAULT_PROMPT = ("Rewrite the following paragraph in plain, simple English, keeping every fact: "
                  "The municipal council convened on Tuesday evening to deliberate on the proposed "
                  "expansion of the public library. After extensive discussion, the council voted "
                  "seven to two in favour of allocating additional funds for the construction of a "
                  "new reading room, a children's section and an expanded digital archive.")


def default():
  c = ml_collections.ConfigDict()
  c.target = "smollm2-135m"
  # A model source, "ngram:N", "early_exit:N", "<draft>+ngram:N", or "" for none. The default:
  # prompt lookup where the text repeats, the shipped feature draft elsewhere
  # (`experiments/lookup_first/`: 1.64 -> 1.89 tokens per pass greedy on the evaluation set).
  c.draft = "smollm2-135m-draft+ngram:3"
  c.fallback_draft = "ngram:3"  # used when the shipped draft cannot be loaded on this machine
  c.k = "auto"  # tokens drafted per round: "auto" (chosen from measured pass costs) or a number
  # "" for the chain; a token tree "static:2,2,1", "dynamic:16" or "auto" (chosen from measured
  # costs, chains included), of depth (at most) k, which must then be a number
  c.tree = ""
  c.prompt = DEFAULT_PROMPT
  c.chat = True  # apply the target's chat template
  c.max_new_tokens = 64
  c.temperature = 0.0
  c.top_k = 0
  c.top_p = 1.0
  c.seed = 0
  c.repeats = 3  # timed runs of each decoder; the fastest counts
  c.check_target = True  # run the target alone: identity check and speedup
  c.explain = True  # time one verify pass, one step and one proposal: the card says why
  c.mesh = ""  # "" = one device; "1,8" or "data=2,model=4": a (data, model) device mesh
  c.dtype = "float32"  # or "bfloat16" (params and caches; logits and sampling stay float32)
  return c


def get_config(arg=None):
  return common.variant("speculate", arg, {"default": default}, "default")
