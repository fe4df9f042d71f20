"""Tiny random models for fast logic tests (duck-typed like `specjax.loading.Model`)."""
from __future__ import annotations

import dataclasses
import os
from typing import Optional

import jax
import numpy as np

from specjax.models import ModelConfig, forward, init_params


_logits = jax.jit(lambda params, cfg, tokens: forward(params, cfg, tokens)[0], static_argnums=1)


@dataclasses.dataclass
class TinyModel:
  cfg: ModelConfig
  params: dict
  name: str = "tiny"
  tokenizer: Optional[object] = None
  eos_ids: tuple = ()

  def logits(self, tokens):
    return _logits(self.params, self.cfg, jax.numpy.asarray(tokens))


def tiny(family="llama", vocab=61, layers=3, seed=0, std=0.3, eos_ids=(), **kw) -> TinyModel:
  """A small random model; std 0.3 gives peaked, tie-free logits."""
  cfg = ModelConfig(family, vocab, 32, layers, 4, 4 if family == "gpt2" else 2, 8, 64,
                    max_positions=kw.pop("max_positions", 512), **kw)
  return TinyModel(cfg, init_params(cfg, jax.random.PRNGKey(seed), std=std),
                   name=f"tiny-{family}-{seed}", eos_ids=tuple(eos_ids))


def perturbed(model: TinyModel, scale: float, seed: int = 5) -> TinyModel:
  """The model with scale * (each matrix's std) of Gaussian noise added to every weight
  matrix: a draft with the target's shapes that agrees with it often but not always
  (scale 0.03 on `tiny()`: greedy alpha ~0.7; 0.1: ~0.3)."""
  leaves, tree = jax.tree.flatten(model.params)
  keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
  noisy = [x + scale * x.std() * jax.random.normal(key, x.shape, x.dtype) if x.ndim >= 2 else x
           for x, key in zip(leaves, keys)]
  return dataclasses.replace(model, params=jax.tree.unflatten(tree, noisy),
                             name=f"{model.name}-perturbed{scale:g}")


def random_prompts(n, vocab, lo=1, hi=12, seed=0):
  rng = np.random.default_rng(seed)
  return [rng.integers(0, vocab, size=int(rng.integers(lo, hi + 1))).tolist() for _ in range(n)]


def reference_greedy(model: TinyModel, prompt, max_new, eos_ids=(), width=64):
  """Greedy decoding by full cache-free forwards, one token at a time.

  Rows are right-padded to one width (one compile); causal attention keeps the
  padding out of the logits at real positions.
  """
  ids = list(prompt)
  out = []
  for _ in range(max_new):
    padded = np.zeros((1, width), np.int32)
    padded[0, :len(ids)] = ids
    logits = model.logits(padded)[0, len(ids) - 1]
    t = int(np.argmax(np.asarray(logits)))
    out.append(t)
    ids.append(t)
    if t in eos_ids:
      break
  return out


def fake_devices_env(n: int, **extra: str) -> dict:
  """The environment of a subprocess on `n` fake CPU devices: this run's (its XLA_FLAGS,
  tests/conftest.py, with the device count appended) plus `extra`."""
  flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={n}"
  return dict(os.environ, XLA_FLAGS=flags.strip(), JAX_PLATFORMS="cpu", **extra)
