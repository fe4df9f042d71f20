"""The SmolLM2-135M feature draft continued on the self-generated data, sized for this
2-core CPU (`experiments/distill_smollm2/README.md`, "Continued on self-generated data").

    python scripts/distill.py --config=configs/distill_smollm2_selfgen.py --workdir=/tmp/selfgen_draft
    python scripts/export_hf.py --config=configs/distill_smollm2_selfgen.py \
        --workdir=/tmp/selfgen_draft --asset=specjax/assets/smollm2-135m-draft

Starts from a trained draft (`draft.init_from`: the templated-prompt draft of
`configs/distill_smollm2.py`, shipped as `smollm2-135m-draft-templated`; its head ids
are kept) instead of a fresh block: on two cores a run from scratch does not get through
several thousand pairs a few times in the time at hand. Data: every training pair of
`data.generated_dir` (the target's own Magpie-style prompts over the 12 categories and its
temperature-1 answers, `configs/generate_data_smollm2.py`) plus one temperature-1 target
continuation per prompt of the training split. Checkpoints are selected on prompts of the
self-generated data's own selection split (eval.select = "generated": 1 pair in 50 by a
hash of its prompt, never trained on), so `prompts_eval.jsonl` and the held-out split
shape neither the draft nor its selection. Lower peak learning rate than from scratch.
Rerun the same command to resume; `--stop_at=N` ends a chunk at step N.
"""
import importlib.util
import os

import ml_collections


def _base():
  """configs/distill_smollm2.py, loaded by path (scripts do not put the repository on sys.path)."""
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distill_smollm2.py")
  spec = importlib.util.spec_from_file_location("distill_smollm2", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod.get_config()


def get_config():
  c = _base()
  c.draft.init_from = "smollm2-135m-draft-templated"  # the draft of configs/distill_smollm2.py
  c.prompts.train_sets = ("train",)
  c.data.greedy_pool = False
  c.data.generated_dir = "/work/data/selfgen_smollm2"
  c.data.generated_max_pairs = 0
  c.optim.lr = 5e-4
  c.optim.warmup_steps = 20
  c.num_steps = 1000
  c.eval = ml_collections.ConfigDict(dict(every=100, engine=True, num_prompts=24, max_new_tokens=48,
                                          k=4, temperature=0.0, select="generated",
                                          select_prompts=24))
  return c
