"""Fields the job configs share: blocks of a ConfigDict, the variant switch, the cache root.

    from configs import common   # the scripts put the repository root on sys.path

Not a config itself (no get_config): the jobs are configs/distill.py, benchmark.py,
curves.py, generate_data.py and speculate.py.
"""
import os

import ml_collections

OPTIM = dict(lr=1e-3, warmup_steps=20, end_lr_fraction=0.1, weight_decay=0.01, clip_norm=1.0,
             b1=0.9, b2=0.98, schedule="cosine")  # AdamW after clipping; warm-up, then decay
PROMPTS = dict(num_train=0, num_heldout=0, max_prompt_len=0, chat=True)  # 0: all of them
TOY = dict(vocab_size=64, d_model=32, n_layers=1, std=0.5)  # `specjax.training.toy`


def block(base: dict, **overrides) -> ml_collections.ConfigDict:
  """A ConfigDict of `base` with some fields replaced (or added)."""
  return ml_collections.ConfigDict({**base, **overrides})


def optim(**overrides) -> ml_collections.ConfigDict:
  return block(OPTIM, **overrides)


def prompts(**overrides) -> ml_collections.ConfigDict:
  return block(PROMPTS, **overrides)


def toy() -> ml_collections.ConfigDict:
  return block(TOY)


def variant(job: str, arg, variants: dict, default: str):
  """The config built by variants[arg] (arg None or "": the default). An unknown argument
  is a ValueError naming the valid ones (the scripts print it as one line)."""
  name = arg or default
  if name not in variants:
    raise ValueError(f"{arg!r} is not a variant of configs/{job}.py; give one of "
                     f"{', '.join(variants)} (default {default}).")
  return variants[name]()


def cache_dir(name: str) -> str:
  """A directory under the project's cache root (`specjax.paths.cache_root`: $SPECJAX_CACHE,
  default ~/.cache/specjax): where generated data lives unless a flag says else."""
  from specjax.paths import cache_root  # the one definition of the cache root
  return os.path.join(cache_root(), name)
