"""The feature draft grown to two blocks: the capacity side of the second round
(`experiments/distill_smollm2/README.md`, "A second round on fresh data").

    python scripts/distill.py --config=configs/distill_smollm2_grow.py --workdir=/work/train/grow2

`configs/distill_smollm2_selfgen2.py` (same data, batches, schedule and selection split)
with a second Llama block: the first round's block first, the new one starting as the
identity (`specjax.training.draft.warm_start`), so at step 0 it drafts exactly what the
first round's draft does. The first round's draft agreed with the target about as often on
its training batches as on its selection prompts, so either more data or more capacity
could be what holds it; the two configs measure each at equal steps. A draft step costs
one block more (about 1.6x the one-block draft's).
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


def get_config():
  c = _selfgen2()
  c.draft.n_layers = 2
  return c
