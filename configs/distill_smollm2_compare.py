"""1-layer vs 3-layer (EAGLE-3 style) features for the SmolLM2-135M feature draft, at
equal training compute, sized for this 2-core CPU (`experiments/distill_smollm2/`).

    python scripts/distill.py --config=configs/distill_smollm2_compare.py:1 --workdir=/tmp/e3/l1
    python scripts/distill.py --config=configs/distill_smollm2_compare.py:3 --workdir=/tmp/e3/l3

The argument is the number of target layers the draft reads: 1 (the last, f_29, as the
shipped draft) or 3 (layers 2, 15 and 29, concatenated and projected by fc_layers).
Everything else is the same: the shipped draft's recipe (`configs/distill_smollm2.py`:
one block, 4096-token head, forward KL + smooth-L1 on features, unroll_steps = 3), sized
down for a CPU shared by several jobs: one temperature-1 target continuation per prompt
of the training split (no greedy pool, no extra split) plus up to 600 self-generated
pairs of `data.generated_dir` (those that exist when the data is first built; frozen into
the workdir), with
checkpoint selection on 16 prompts split off the training sets (eval.select = "train"),
so neither the held-out split nor prompts_eval.jsonl shapes the draft or its selection.
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


LAYERS = {1: (-1,), 3: (2, 15, 29)}


def get_config(arg: str = "1"):
  c = _base()
  n = int(arg)
  if n not in LAYERS:
    raise ValueError(f"distill_smollm2_compare.py:{arg}: give 1 or 3 (target layers read).")
  c.draft.feature_layers = LAYERS[n]
  c.prompts.train_sets = ("train",)
  c.data.greedy_pool = False
  c.data.generated_dir = "/work/data/selfgen_smollm2"
  c.data.generated_max_pairs = 600
  c.eval = ml_collections.ConfigDict(dict(every=100, engine=True, num_prompts=16, max_new_tokens=48,
                                          k=4, temperature=0.0, select="train", select_prompts=16))
  c.num_steps = 600
  return c
