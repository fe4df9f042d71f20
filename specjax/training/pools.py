"""Pools and batches: the trainer's data stage, from prompts to the batch at each step.

Axes: N sequences in a pool, B batch, L sequence length, F feature width.

    draft_cfg, params, pool = prepare_draft(config, workdir, target, train_prompts, log)
    pools = Pools(config, workdir, target, train_prompts, pool, draft_cfg, log)
    batch = pools.batch_at(step, params, rng)           # host numpy, [B, L(, F)]

`sampled_pool` is how every task (Medusa heads too) samples the target. Every pool is
cached in workdir/data (`specjax.training.data` has the format, `store` the files) so a
resumed run trains on exactly the same rows:
  * per training prompt set: target_pool{_set}.npz (temperature data.temperature),
    target_pool_greedy{_set}.npz (data.greedy_pool), and for a feature draft
    target_features{_l...}{_set}.npz (`specjax.training.teacher.add_features`);
  * generated_pool.npz: data.generated_dir's prompt-response pairs
    (`specjax.training.selfgen.load_pairs`), frozen at first use;
  * the evaluation pool used for checkpoint selection: heldout_pool.npz over the
    held-out prompts (eval.select = "heldout", the default), or select_pool.npz over
    eval.select_prompts prompts split off the training sets (eval.select = "train": they
    and their rows leave the training pools, so selection never sees a trained-on
    prompt, and the held-out / evaluation prompts stay untouched by training AND
    selection), or select_generated_pool.npz over prompts of the self-generated data's
    own selection split (eval.select = "generated");
  * draft_pool_<step>.npz: draft-sampled pools (data.source "draft" / "mix").
"""
from __future__ import annotations

import os
import time
from typing import Callable, Optional, Sequence

import jax
import numpy as np

from specjax.training import data as data_lib
from specjax.training import draft as draft_lib
from specjax.training import selfgen
from specjax.training.sampler import add_teacher_topk, sample_pool
from specjax.training.store import cached_pool, trim
from specjax.training.teacher import add_features, features_file

_TEACHER_KEYS = ("teacher_ids", "teacher_logp")


def pool_path(workdir: Optional[str], name: str) -> Optional[str]:
  return workdir and os.path.join(workdir, "data", f"{name}.npz")


def sampled_pool(target, prompts, d, *, temperature: float, key, path: Optional[str], log,
                 what: str, top_k_teacher: int = 0) -> dict:
  """The target's continuations of `prompts` at `temperature` (`specjax.training.sampler`;
  d: config.data for the lengths and batch size), cached at `path`: the one way every
  task samples the target."""
  def make():
    log(f"Sampling target continuations (T = {temperature:g}) for {len(prompts)} prompts of "
        f"{what} ...")
    return sample_pool(
        target.params, target.cfg, prompts, max_new=d.max_new_tokens, seq_len=d.seq_len,
        key=key, eos_ids=target.eos_ids, temperature=temperature,
        batch_size=d.sample_batch_size, top_k_teacher=top_k_teacher,
        progress=lambda i, n: log(f"  sampled {i}/{n} ({time.strftime('%H:%M:%S')})"))
  return cached_pool(path, make)


def _layers(config, target):
  return draft_lib.feature_layers(config.draft, target.cfg.n_layers)


def cached_features(config) -> bool:
  """Whether training pools carry the target's features (a feature draft, unless
  data.features = "online": the train step computes them from the target)."""
  return draft_lib.is_feature(config.draft) and config.data.get("features", "cached") != "online"


def selection_split(config, train_prompts) -> dict:
  """{set name: sorted prompt indices} split off for checkpoint selection (eval.select =
  "train"): eval.select_prompts of all training prompts, a pure function of the seed;
  {} with eval.select = "heldout" (the default) or "generated" (`generated_selection`)."""
  ev = config.eval
  select = ev.get("select", "heldout")
  if select not in ("heldout", "train", "generated"):
    raise ValueError(f"eval.select must be 'heldout', 'train' or 'generated', got {select!r}.")
  if select != "train":
    return {}
  sets = data_lib.prompt_sets(train_prompts)
  total = sum(map(len, sets.values()))
  m = int(ev.get("select_prompts", 32))
  if not 0 < m < total:
    raise ValueError(f"eval.select_prompts={m} must be between 1 and the {total - 1} training "
                     "prompts it is split from.")
  chosen = np.sort(np.random.default_rng([config.seed, 77]).permutation(total)[:m])
  out, offset = {}, 0
  for name, prompts in sets.items():
    idx = chosen[(chosen >= offset) & (chosen < offset + len(prompts))] - offset
    out[name] = idx
    offset += len(prompts)
  return out


def set_pool(config, workdir, target, name: str, prompts, index: int, key, log,
             drop: Sequence[int] = ()) -> dict:
  """One prompt set's target pool: a temperature-`data.temperature` continuation per prompt
  (samples_per_prompt of them), plus a greedy one if `data.greedy_pool`, plus the target's
  features for a feature draft; each part cached in workdir/data (suffix _{name} except
  for the set "train"). drop: prompt indices whose rows leave the pool (the selection split)."""
  d = config.data
  n_prompts = len(prompts)
  prompts = list(prompts) * d.get("samples_per_prompt", 1)
  suffix = "" if name == "train" else f"_{name}"
  path = lambda stem: pool_path(workdir, stem + suffix)

  def sampled(stem: str, temperature: float, stream: int) -> dict:
    return sampled_pool(target, prompts, d, temperature=temperature,
                        key=jax.random.fold_in(key, stream + 10 * index), path=path(stem),
                        log=log, what=f"set {name!r}",
                        top_k_teacher=d.teacher_top_k if d.teacher == "topk" else 0)
  pool = sampled("target_pool", d.temperature, 1)
  if d.get("greedy_pool", False):  # plus one greedy continuation per prompt
    pool = data_lib.concat_batches([pool, sampled("target_pool_greedy", 0.0, 3)])
  if cached_features(config):
    layers = _layers(config, target)
    add_features(pool, target, path(features_file("target_features", layers)), log, layers)
  if len(drop):
    keep = ~np.isin(np.arange(pool["tokens"].shape[0]) % n_prompts, np.asarray(drop))
    pool = {k: v[keep] for k, v in pool.items()}
  return pool


def _load_pairs(data_dir: str) -> list:
  """The self-generated pairs of data_dir for training: selfgen keeps a selection split of
  its own, and training reads only its "train" pairs."""
  return selfgen.load_pairs(data_dir, split="train")


def pairs_to_pool(pairs: Sequence[dict], seq_len: int, max_new: int) -> dict:
  """Prompt-response pairs -> a pool: prompt (its last seq_len - max_new tokens) then the
  response, cut at seq_len; the mask covers the response tokens."""
  n = len(pairs)
  tokens = np.zeros((n, seq_len), np.int32)
  mask = np.zeros((n, seq_len), np.float32)
  for r, p in enumerate(pairs):
    prompt = list(p["prompt_ids"])[-(seq_len - max_new):]
    resp = list(p["response_ids"])[:seq_len - len(prompt)]
    pl, g = len(prompt), len(resp)
    tokens[r, :pl] = prompt
    tokens[r, pl:pl + g] = resp
    mask[r, pl - 1:pl - 1 + g] = 1.0  # position t predicts token t + 1
  return {"tokens": tokens, "mask": mask}


def generated_pool(config, workdir, target, log, exclude: Sequence[Sequence[int]] = ()):
  """data.generated_dir's pairs as a pool (None without one), at most data.generated_max_pairs
  (0: all), without pairs whose prompt is in `exclude` (the selection prompts); frozen in
  workdir/data/generated_pool.npz at first use (later shards are not added to a run)."""
  d = config.data
  data_dir = d.get("generated_dir", "")
  if not data_dir:
    return None

  def make():
    pairs = _load_pairs(data_dir)
    banned = {tuple(int(t) for t in p) for p in exclude}
    pairs = [p for p in pairs if tuple(int(t) for t in p["prompt_ids"]) not in banned]
    if d.get("generated_max_pairs", 0):
      pairs = pairs[:d.generated_max_pairs]
    if not pairs:
      raise ValueError(f"config.data.generated_dir={data_dir!r} holds no usable pairs; generate "
                       "some first (scripts of specjax.training.selfgen) or unset it.")
    log(f"{len(pairs)} generated pairs from {data_dir}.")
    return pairs_to_pool(pairs, d.seq_len, d.max_new_tokens)
  pool = cached_pool(pool_path(workdir, "generated_pool"), make)
  if cached_features(config):
    layers = _layers(config, target)
    add_features(pool, target, pool_path(workdir, features_file("generated_features", layers)),
                 log, layers)
  elif not draft_lib.is_feature(config.draft) and d.teacher == "topk":
    pool = cached_pool(pool_path(workdir, "generated_teacher"), lambda: add_teacher_topk(
        pool, target.params, target.cfg, d.teacher_top_k))
  return pool


def generated_selection(config) -> list:
  """eval.select = "generated": eval.select_prompts prompts of data.generated_dir's own
  selection split (`selfgen.load_pairs(..., "select")`, never trained on), evenly spread."""
  data_dir = config.data.get("generated_dir", "")
  if not data_dir:
    raise ValueError("eval.select='generated' selects checkpoints on self-generated prompts: "
                     "set config.data.generated_dir, or use eval.select='train'.")
  prompts = [list(map(int, p["prompt_ids"])) for p in selfgen.load_pairs(data_dir, split="select")]
  if not prompts:
    raise ValueError(f"config.data.generated_dir={data_dir!r} has no selection-split pairs yet; "
                     "generate more shards or use eval.select='train'.")
  return data_lib.spread(prompts, int(config.eval.get("select_prompts", 32)))


def target_pool(config, workdir, target, train_prompts, log) -> dict:
  """The target-sampled training pool: every prompt set's pool (minus the selection
  split), then the generated pairs, concatenated in that order."""
  key = jax.random.PRNGKey(config.seed)
  split = selection_split(config, train_prompts)
  sets = data_lib.prompt_sets(train_prompts)
  pools = [set_pool(config, workdir, target, name, prompts, i, key, log, split.get(name, ()))
           for i, (name, prompts) in enumerate(sets.items())]
  excluded = [sets[name][i] for name, idx in split.items() for i in idx]
  gen = generated_pool(config, workdir, target, log, exclude=excluded)
  if gen is not None:
    pools.append(gen)
  if draft_lib.is_feature(config.draft) and gen is not None:
    # A feature draft's teacher is the head on the features: stored top-K is not read.
    pools = [{k: v for k, v in p.items() if k not in _TEACHER_KEYS} for p in pools]
  return data_lib.concat_batches(pools)


def prepare_draft(config, workdir: Optional[str], target, train_prompts, log=print):
  """Target pools (cached) -> draft vocabulary -> (draft_cfg, draft_params, target_pool).

  train_prompts: a list of prompts, or a dict of named prompt sets (`data_lib.prompt_sets`);
  each set gets its own cached pools (the set "train" keeps the plain file names), and the
  target pool is their concatenation in order.
  """
  d = config.data
  need_target_pool = d.source in ("target", "mix") or config.draft.head_vocab_size > 0
  if draft_lib.is_feature(config.draft) and d.source != "target":
    raise ValueError("A feature draft trains on target continuations (data.source='target'): "
                     "it cannot sample on its own without the target's features.")
  pool = target_pool(config, workdir, target, train_prompts, log) if need_target_pool else None
  counts = None
  if config.draft.head_vocab_size > 0 and not config.draft.get("init_from", ""):
    counts = data_lib.token_frequencies([pool], target.cfg.vocab_size)
  head_vocab = draft_lib.head_vocab_for(config, counts, target.eos_ids)
  draft_cfg, draft_params = draft_lib.init_draft(config, target, head_vocab)
  if config.draft.get("init_from", ""):
    draft_params = draft_lib.warm_start(config, target, draft_params)
  return draft_cfg, draft_params, pool


def eval_pool(config, workdir, target, train_prompts, heldout_prompts, log):
  """(pool of target-greedy continuations, engine prompts) for the periodic evaluation that
  selects checkpoints: the held-out prompts, or the selection split (module docstring)."""
  d, ev = config.data, config.eval
  split = selection_split(config, train_prompts)
  if ev.get("select", "heldout") == "generated":
    prompts, stem = generated_selection(config), "select_generated"
  elif split:
    sets = data_lib.prompt_sets(train_prompts)
    prompts = [sets[name][i] for name, idx in split.items() for i in idx]
    stem = "select"
  else:
    prompts, stem = list(heldout_prompts), "heldout"
  pool = sampled_pool(target, prompts, d, temperature=0.0, key=jax.random.PRNGKey(0),
                      path=pool_path(workdir, f"{stem}_pool"), log=log, what=f"{stem!r}")
  if draft_lib.is_feature(config.draft):
    layers = _layers(config, target)
    add_features(pool, target, pool_path(workdir, features_file(f"{stem}_features", layers)),
                 log, layers)
  return pool, data_lib.spread(prompts, ev.num_prompts)


class Pools:
  """The training pools of a run and the batch at each step (a pure function of the seed,
  the step and, for draft-sampled data, the draft params at the last refresh)."""

  def __init__(self, config, workdir: str, target, train_prompts, pool: Optional[dict],
               draft_cfg, log: Callable = print):
    d = config.data
    self.config, self.workdir, self.target, self.log = config, workdir, target, log
    self.train_prompts, self.pool, self.draft_cfg = train_prompts, pool, draft_cfg
    self.n_draft = {"target": 0, "draft": config.batch_size,
                    "mix": int(round(d.draft_fraction * config.batch_size))}[d.source]
    self._draft_pool, self._draft_pool_step = None, None

  def draft_pool_at(self, step: int, params, rng) -> dict:
    """The draft-sampled pool in force at `step` (regenerated every refresh_every steps)."""
    d = self.config.data
    at = (step // d.refresh_every) * d.refresh_every if d.refresh_every else 0
    if self._draft_pool_step != at:
      def make():
        self.log(f"Sampling draft continuations (step {at}) ...")
        prompts = [p for ps in data_lib.prompt_sets(self.train_prompts).values() for p in ps]
        prompts = prompts * d.get("samples_per_prompt", 1)
        pool = sample_pool(
            params, self.draft_cfg, prompts, max_new=d.max_new_tokens, seq_len=d.seq_len,
            key=jax.random.fold_in(rng, at), eos_ids=self.target.eos_ids,
            temperature=d.temperature, batch_size=d.sample_batch_size)
        if d.teacher == "topk":
          pool = add_teacher_topk(pool, self.target.params, self.target.cfg,
                                           d.teacher_top_k)
        return pool
      self._draft_pool = cached_pool(pool_path(self.workdir, f"draft_pool_{at:07d}"), make)
      self._draft_pool_step = at
    return self._draft_pool

  def batch_at(self, step: int, params=None, rng=None) -> dict:
    """The global batch of `step` as host arrays; params / rng (the draft's full params and
    the run's base key) are read only when a draft-sampled pool is due."""
    c = self.config
    parts = []
    if self.n_draft:
      pool = self.draft_pool_at(step, params, rng)
      parts.append(data_lib.take(pool, data_lib.batch_indices(
          c.seed, step, pool["tokens"].shape[0], self.n_draft, stream=1)))
    if c.batch_size - self.n_draft:
      parts.append(data_lib.take(self.pool, data_lib.batch_indices(
          c.seed, step, self.pool["tokens"].shape[0], c.batch_size - self.n_draft, stream=0)))
    return trim(data_lib.concat_batches(parts), c.data.get("trim_multiple", 64))
