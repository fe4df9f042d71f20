"""How often greedy speculative output differs from the target alone in bfloat16.

    python experiments/scale/bf16_greedy.py        # writes experiments/scale/bf16_greedy.json

Tiny random Llama targets (2 layers, width 64, vocabulary 512) at two weight scales
(std 0.3: peaked logits; std 0.05: flat logits with many near-ties), params and caches in
float32 and in bfloat16, 64 prompts x 32 new tokens, greedy, k = 4, with three drafters
(n-gram, early exit at 1 layer, a 1-layer random draft model). A row mismatches when its
speculative tokens differ from the same-dtype target alone anywhere. float32 is the control.
"""
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
import specjax  # noqa: E402
from specjax.models import ModelConfig, init_params  # noqa: E402
from specjax.models.params import cast  # noqa: E402


class Tiny:
  def __init__(self, cfg, params, name):
    self.cfg, self.params, self.name, self.tokenizer, self.eos_ids = cfg, params, name, None, ()


def main():
  rng = np.random.default_rng(0)
  prompts = [rng.integers(0, 512, size=int(rng.integers(4, 24))).tolist() for _ in range(64)]
  rows = []
  for std in (0.3, 0.05):
    cfg = ModelConfig("llama", 512, 64, 2, 4, 2, 16, 128, max_positions=256)
    dcfg = ModelConfig("llama", 512, 64, 1, 4, 2, 16, 128, max_positions=256)
    params = init_params(cfg, jax.random.PRNGKey(1), std=std)
    dparams = init_params(dcfg, jax.random.PRNGKey(2), std=std)
    for dtype in ("float32", "bfloat16"):
      dt = jnp.dtype(dtype)
      target = Tiny(cfg, cast(params, dt), f"tiny-std{std}")
      draft = Tiny(dcfg, cast(dparams, dt), "draft")
      base = specjax.generate(target, prompts, max_new_tokens=32, eos_ids=()).tokens
      for label, d in (("ngram:2", "ngram:2"), ("early_exit:1", "early_exit:1"),
                       ("draft_model", draft)):
        out = specjax.generate(target, prompts, max_new_tokens=32, draft=d, k=4, eos_ids=())
        first = [next((i for i, (a, b) in enumerate(zip(s, t)) if a != b), None)
                 for s, t in zip(out.tokens, base)]
        bad = [f for f in first if f is not None]
        rows.append({"std": std, "dtype": dtype, "drafter": label, "rows": len(prompts),
                     "new_tokens_per_row": 32, "rows_mismatched": len(bad),
                     "mismatch_rate": len(bad) / len(prompts),
                     "first_mismatch_positions": bad,
                     "acceptance_rate": out.stats.to_dict()["acceptance_rate"]})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "first_mismatch_positions"}),
              flush=True)
  out = {"device": str(jax.devices()[0].platform), "jax": jax.__version__, "results": rows}
  with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "bf16_greedy.json"), "w") as f:
    json.dump(out, f, indent=1)


if __name__ == "__main__":
  main()
