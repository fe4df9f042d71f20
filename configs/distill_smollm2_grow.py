"""The feature draft grown to two blocks: the capacity side of the second round
(`experiments/distill_smollm2/README.md`, "A second round on fresh data" and "Two blocks").

    python scripts/distill.py --config=configs/distill_smollm2_grow.py --workdir=/work/train/grow2
    CONFIG=configs/distill_smollm2_grow.py ARMS="1 2" W=/work/train/grow \\
        bash experiments/distill_smollm2/compare/run.sh    # both arms side by side

The argument is the number of blocks (default 2). `:1` is
`configs/distill_smollm2_selfgen2.py` itself (the shipped draft continued on the seed-1
self-generated cache); `:2` adds a second Llama block after the shipped draft's, starting
as the identity (`specjax.training.draft.warm_start`), so at step 0 it drafts exactly what
the shipped draft does. Same data, batches, schedule and selection split. The first round's
draft agreed with the target about as often on its training batches as on its selection
prompts (0.51 vs 0.47 over its last 200 steps), so either more data or more capacity could
be what holds it; run side by side, the two arms measure capacity at equal steps. A draft
step costs one block more.
"""
import importlib.util
import os


def _selfgen2():
  """configs/distill_smollm2_selfgen2.py, loaded by path."""
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distill_smollm2_selfgen2.py")
  spec = importlib.util.spec_from_file_location("distill_smollm2_selfgen2", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod.get_config()


def get_config(arg: str = "2"):
  if arg not in ("1", "2"):
    raise ValueError(f"distill_smollm2_grow.py:{arg}: give 1 or 2 (draft blocks).")
  c = _selfgen2()
  c.draft.n_layers = int(arg)
  return c
