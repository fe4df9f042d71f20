"""Evaluation and metrics: teacher-forced agreement, the real engine, metrics files.

Axes: B batch, L sequence length, F feature width.

    heldout_agreement(params, cfg, pool)   cheap greedy-alpha proxy on a pool of
                                           target-greedy continuations
    engine_eval(target, cfg, params, ...)  alpha and tokens per pass of the real engine
                                           (a draft model or Medusa heads)
    MetricsWriter(workdir).write(step, m)  workdir/metrics.jsonl and TensorBoard (tb/)
    read_metrics(workdir)                  the rows back, a resumed run's replays deduplicated
"""
from __future__ import annotations

import functools
import json
import os
import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

import specjax
from specjax.decoding.drafters import FeatureDrafter, MedusaDrafter, ModelDrafter
from specjax.models import ModelConfig, feature_forward, is_feature_draft
from specjax.models.medusa import MedusaConfig
from specjax.training.teacher import student_logits, support_ids, support_logits


@functools.partial(jax.jit, static_argnames=("cfg",))
def _draft_argmax(params, tokens, features, *, cfg: ModelConfig):
  """[B, L] support positions of the draft's argmax for the token after each position."""
  if features is None:
    return jnp.argmax(student_logits(params, cfg, tokens), -1)
  # A feature draft at j predicts token j + 2; shift so that row j predicts token j + 1.
  pred, _ = feature_forward(params, cfg, features[:, :-1].astype(jnp.float32), tokens[:, 1:])
  out = jnp.argmax(support_logits(params, cfg, pred), -1)
  return jnp.concatenate([jnp.full_like(out[:, :1], -1), out], 1)


def heldout_agreement(params, cfg: ModelConfig, pool: dict, batch_size: int = 8) -> float:
  """Teacher-forced top-1 agreement on held-out target-greedy continuations: the fraction of
  positions where the draft's argmax is the target's greedy token (a cheap greedy-alpha proxy).
  A feature draft reads the target's features (pool["features"]); its first position has none."""
  fn = lambda p, t, f: _draft_argmax(p, t, f, cfg=cfg)
  support = np.asarray(support_ids(params, cfg))
  feature = is_feature_draft(params)
  hits = total = 0.0
  for s in range(0, pool["tokens"].shape[0], batch_size):
    toks, mask = pool["tokens"][s:s + batch_size], pool["mask"][s:s + batch_size]
    pad = ((0, batch_size - toks.shape[0]), (0, 0))
    feats = jnp.asarray(np.pad(pool["features"][s:s + batch_size], pad + ((0, 0),))) if feature else None
    pred = np.asarray(fn(params, jnp.asarray(np.pad(toks, pad)), feats))[:toks.shape[0]]
    nxt = toks[:, 1:]
    valid = mask[:, :-1] * (pred[:, :-1] >= 0)
    hits += float(((support[np.maximum(pred[:, :-1], 0)] == nxt) * valid).sum())
    total += float(valid.sum())
  return hits / max(total, 1.0)


def drafter_for(target, cfg, params):
  """The drafter of trained params, for `specjax.generate(draft=...)`: Medusa heads (a
  `MedusaConfig`), a feature draft (params with "fc") or an LM draft."""
  if isinstance(cfg, MedusaConfig):
    return MedusaDrafter.for_target(cfg, params, target)
  if is_feature_draft(params):
    return FeatureDrafter.of(params, cfg, name="draft")
  return ModelDrafter(params=params, cfg=cfg, name="draft")


def engine_eval(target, draft_cfg, draft_params, prompts: Sequence, *,
                max_new_tokens: int, k: int, temperature: float = 0.0, seed: int = 0,
                tree=None, with_baseline: bool = False) -> dict:
  """alpha and tokens per target pass of the real speculative engine with this draft
  (`drafter_for`); with_baseline also times the target alone and reports the speedup."""
  draft = drafter_for(target, draft_cfg, draft_params)
  res = specjax.generate(target, list(prompts), max_new_tokens, draft=draft, k=k, tree=tree,
                         temperature=temperature, seed=seed)
  out = {"alpha": res.stats.acceptance_rate, "tokens_per_pass": res.stats.tokens_per_pass,
         "spec_wall_s": res.stats.wall_time_s}
  if with_baseline:
    base = specjax.generate(target, list(prompts), max_new_tokens, temperature=temperature,
                            seed=seed)
    out["target_wall_s"] = base.stats.wall_time_s
    out["speedup"] = base.stats.wall_time_s / max(res.stats.wall_time_s, 1e-9)
  return out


def evaluate(target, draft_cfg: ModelConfig, params, eval_pool: dict, eval_prompts: Sequence,
             ev, seed: int) -> dict:
  """The periodic evaluation: agreement on the evaluation pool, plus the engine's alpha and
  tokens per pass on eval_prompts when ev.engine."""
  m = {"heldout_top1_agree": heldout_agreement(params, draft_cfg, eval_pool)}
  if ev.engine:
    r = engine_eval(target, draft_cfg, params, eval_prompts, max_new_tokens=ev.max_new_tokens,
                    k=ev.k, temperature=ev.temperature, seed=seed)
    m.update(alpha=r["alpha"], tokens_per_pass=r["tokens_per_pass"])
  return m


class MetricsWriter:
  """Metrics as JSON lines (workdir/metrics.jsonl) and TensorBoard events (workdir/tb)."""

  def __init__(self, workdir: str, enabled: bool = True):
    self.enabled = enabled and jax.process_index() == 0
    self.path = os.path.join(workdir, "metrics.jsonl")
    self.tb = None
    if self.enabled:
      from tensorboardX import SummaryWriter
      self.tb = SummaryWriter(os.path.join(workdir, "tb"))

  def write(self, step: int, metrics: dict) -> None:
    if not self.enabled:
      return
    clean = {k: float(v) for k, v in metrics.items()}
    with open(self.path, "a", encoding="utf-8") as f:
      f.write(json.dumps({"step": int(step), "time": time.time(), **clean}) + "\n")
    for k, v in clean.items():
      self.tb.add_scalar(k, v, int(step))
    self.tb.flush()

  def close(self) -> None:
    if self.tb is not None:
      self.tb.close()


def read_metrics(workdir: str) -> list:
  """The metrics.jsonl rows of a workdir; a resumed run's replayed steps keep the last row."""
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  rows = {}
  with open(path, encoding="utf-8") as f:
    for line in f:
      if line.strip():
        r = json.loads(line)
        rows[(r["step"], tuple(sorted(r)))] = r
  return sorted(rows.values(), key=lambda r: r["step"])
