"""The batched sweep's floor: the bare decode step in a fori_loop gives the target-alone
greedy tokens of `generate`, short and mixed-length batches alike (so the floor it times
is the same work as the loop)."""
import numpy as np

from specjax.apps import batch_sweep
from specjax.decoding.generate import generate
from tiny_models import random_prompts, tiny


def test_floor_tokens_equal_generate():
  model = tiny(layers=2)
  prompts = random_prompts(4, model.cfg.vocab_size, lo=2, hi=9, seed=3)
  prompts[1] = prompts[1] * 20  # a longer row beside short ones
  out = generate(model, prompts, 7, eos_ids=())
  _, tokens = batch_sweep.floor_runner(model, prompts, 7)
  assert tokens.shape == (4, 7)
  assert [list(map(int, t)) for t in tokens] == out.tokens
  # Negative control: another model's floor (same shapes) does not give these tokens.
  _, other = batch_sweep.floor_runner(tiny(layers=2, seed=1), prompts, 7)
  assert [list(map(int, t)) for t in other] != out.tokens


def test_mixed_prompts_shape():
  class Enc:
    def encode(self, text, chat=False):
      return [ord(c) % 50 for c in text[:30]]
  prompts = batch_sweep.mixed_prompts(Enc(), 5)
  lens = [len(p) for p in prompts]
  assert lens[0] == batch_sweep.LONG_LENGTHS[0] and lens[4] == batch_sweep.LONG_LENGTHS[1]
  assert all(n <= 30 for n in lens[1::2]) and np.all(np.diff(lens[0::2]) > 0)
