"""Measures a draft before and after distillation on the evaluation set, per category.

    python scripts/eval_draft.py --config=configs/distill.py:selfgen \
        --asset=specjax/assets/smollm2-135m-draft --num_prompts=16 --max_new=48 \
        --speed_prompts=4 --speed_ks=2,4 --out=/tmp/eval_selfgen.json
    python scripts/eval_draft.py ... --prompts=heldout            # the templated held-out split
    python scripts/eval_draft.py ... --prompts=path/to/question.jsonl --num_prompts=0  # Spec-Bench

Prompts (--prompts): by default the evaluation set `specjax/data/prompts_eval.jsonl`
(hand-written, 12 categories, never used for training or checkpoint selection); any
source of `specjax/prompts.py` ("heldout", "repeat", "+"-joined) or a prompts file
(Spec-Bench's question.jsonl or the project's .jsonl). --num_prompts of them, the same
share from every category (0: all).

For the draft at initialisation ("before": the config's draft built from the target,
with the same reduced vocabulary, or the `draft.init_from` asset a continued run starts
from) and the distilled one ("after": --asset, else the
workdir's best checkpoint), with the real speculative engine:
  * alpha and tokens per target pass for k = 1..8, greedy and temperature 1, on
    --num_prompts prompts decoded as one batch (--max_new tokens each), overall and per
    category (the per-category table at k = --category_k);
  * wall-clock speedup over the target alone at batch 1 (--speed_prompts prompts of one
    length bucket, decoded one at a time; compile excluded), measured in the same run;
  * per-token cost of one draft decode step relative to one target decode step.
Writes JSON and prints a markdown table.
"""
import json
import os
import sys
import time

from absl import app, flags, logging

from config_cli import define_config

FLAGS = flags.FLAGS
define_config(None, "The distillation config (configs/distill.py[:variant]).",
              example="configs/distill.py")
flags.DEFINE_string("workdir", None, "The distillation workdir (data pools, checkpoints); "
                    "needed without --asset.")
flags.DEFINE_string("asset", None, "The distilled draft asset (default: best checkpoint).")
flags.DEFINE_string("out", None, "Write the results JSON here.")
flags.DEFINE_string("prompts", "eval", "Prompt source for the tables: eval (default), heldout, "
                    "repeat, builtin ('+'-joined) or a prompts .jsonl path (Spec-Bench "
                    "question.jsonl).")
flags.DEFINE_integer("num_prompts", 32, "Prompts for the alpha table, spread over the categories "
                     "(0: all).")
flags.DEFINE_integer("category_k", 4, "k of the per-category table.")
flags.DEFINE_integer("max_new", 64, "New tokens per prompt.")
flags.DEFINE_list("ks", [str(k) for k in range(1, 9)], "Draft lengths.")
flags.DEFINE_list("temperatures", ["0", "1"], "Sampling temperatures.")
flags.DEFINE_integer("speed_prompts", 6, "Prompts for the batch-1 speedup (0: none).")
flags.DEFINE_list("speed_ks", ["3", "4", "5"], "k values for the batch-1 speedup.")
flags.mark_flags_as_required(["config"])


def step_cost_ms(params, cfg, n=30):
  """Median wall time of one jitted batch-1 decode step (forward + argmax) at cache length 128;
  a feature draft's step reads one feature and one token (what each of its k passes does)."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from specjax.models import KVCache, feature_forward, forward, head, is_feature_draft

  @jax.jit
  def f(p, tok, cache):
    if is_feature_draft(p):
      hidden, cache = feature_forward(p, cfg, jnp.ones((1, 1, cfg.d_model)), tok, cache)
      logits = head(p, cfg, hidden)
    else:
      logits, cache = forward(p, cfg, tok, cache)
    return jnp.argmax(logits[:, -1], -1), cache

  cache = KVCache.init(cfg, 1, 256).with_lengths(jnp.full((1,), 128, jnp.int32))
  tok = jnp.zeros((1, 1), jnp.int32)
  f(params, tok, cache)[0].block_until_ready()
  ts = []
  for _ in range(n):
    s = time.perf_counter()
    f(params, tok, cache)[0].block_until_ready()
    ts.append(time.perf_counter() - s)
  return 1e3 * float(np.median(ts))


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  import numpy as np
  import specjax
  from types import SimpleNamespace
  from specjax.loading.asset import load_asset
  from specjax import prompts as prompts_lib
  from specjax.apps import common
  from specjax.training import data as data_lib
  from specjax.training.setup import setup_target
  from specjax.training.checkpoints import CheckpointError, require_checkpoint
  from specjax.training.train import init_draft, prepare_draft, restore_draft
  config = FLAGS.config
  if not FLAGS.asset and not FLAGS.workdir:
    raise app.UsageError("Pass --asset=DIR (a draft asset) or --workdir=DIR (a distillation run).")
  if not FLAGS.asset:
    try:  # a workdir without a trained draft: one line, before any model loads or pool is sampled
      require_checkpoint(FLAGS.workdir, best=True)
    except CheckpointError as e:
      sys.exit(f"error: {e}")
  try:  # a bad prompts source or file: one line, before any model loads
    rows = prompts_lib.spread_by_category(prompts_lib.select(FLAGS.prompts, 0), FLAGS.num_prompts)
  except ValueError as e:
    sys.exit(f"error: --prompts={FLAGS.prompts}: {e}")
  target, train_prompts, held = setup_target(config)
  if FLAGS.asset:
    # "before": the config's initialisation with the asset's own reduced vocabulary (the
    # one the trainer chose), so no target pool needs sampling.
    after = load_asset(FLAGS.asset, target=target)
    a_cfg, a_params = after.cfg, after.params
    b_cfg, b_params = init_draft(config, target, a_params.get("head_vocab"))
    if config.draft.get("init_from", ""):  # a continued run starts from that draft
      from specjax.training.draft import warm_start
      b_params = warm_start(config, target, b_params)
  else:
    b_cfg, b_params, _ = prepare_draft(config, FLAGS.workdir, target, train_prompts,
                                       log=lambda *_: 0)
    a_cfg, a_params = restore_draft(config, FLAGS.workdir, target, train_prompts, best=True)
  drafts = {"before": SimpleNamespace(name="init", cfg=b_cfg, params=b_params),
            "after": SimpleNamespace(name="distilled", cfg=a_cfg, params=a_params)}
  res = {"num_prompts": FLAGS.num_prompts, "max_new": FLAGS.max_new, "table": [], "speed": []}
  t_ms = step_cost_ms(target.params, target.cfg)
  res["cost"] = {"target_step_ms": t_ms, "draft_step_ms": step_cost_ms(a_params, a_cfg)}
  res["cost"]["ratio"] = res["cost"]["draft_step_ms"] / t_ms
  print("cost", res["cost"], flush=True)
  if getattr(target, "tokenizer", None) is None:  # the toy target: its own token-id prompts
    rows = [{"id": f"toy-{i}", "category": "toy"} for i in range(len(held))]
    rows, prompts = rows[:FLAGS.num_prompts or None], held[:FLAGS.num_prompts or None]
    label = "toy prompts"
  else:
    prompts = [target.encode(r["text"], chat=config.prompts.chat) for r in rows]
    label = FLAGS.prompts
  cats = prompts_lib.by_category(rows)
  res["prompts"] = {"source": label, "ids": [r["id"] for r in rows],
                    "per_category": {c: len(i) for c, i in cats.items()}}
  for temp in [float(t) for t in FLAGS.temperatures]:
    for k in [int(k) for k in FLAGS.ks]:
      row = {"temperature": temp, "k": k, "by_category": {c: {} for c in cats}}
      for name, d in drafts.items():
        r = specjax.generate(target, prompts, FLAGS.max_new, draft=d, k=k, temperature=temp, seed=0)
        row[name] = {"alpha": r.stats.acceptance_rate, "tokens_per_pass": r.stats.tokens_per_pass}
        for c, idx in cats.items():
          sub = common.select_rows(r.stats, idx)
          row["by_category"][c][name] = {"alpha": sub.acceptance_rate,
                                         "tokens_per_pass": sub.tokens_per_pass}
      res["table"].append(row)
      print(json.dumps(row), flush=True)
  # Batch-1 speedup: prompts sharing one length bucket (one compile), one at a time.
  from specjax.decoding.plan import prompt_bucket
  by_bucket = {}
  for p in prompts:
    by_bucket.setdefault(prompt_bucket(len(p)), []).append(p)
  # --speed_prompts=0 (or an empty --speed_ks): acceptance tables only.
  speed_set = (data_lib.spread(max(by_bucket.values(), key=len), FLAGS.speed_prompts)
               if FLAGS.speed_prompts > 0 and FLAGS.speed_ks else [])
  for temp in [float(t) for t in FLAGS.temperatures] if speed_set else []:
    def wall(draft=None, k=4):
      specjax.generate(target, [speed_set[0]], FLAGS.max_new, draft=draft, k=k, temperature=temp)  # compile
      total, toks = 0.0, 0
      for p in speed_set:
        r = specjax.generate(target, [p], FLAGS.max_new, draft=draft, k=k, temperature=temp)
        total += r.stats.wall_time_s
        toks += int(r.stats.new_tokens.sum())
      return total, toks
    base_s, base_toks = wall()
    for k in [int(k) for k in FLAGS.speed_ks]:
      for name, d in drafts.items():
        s, toks = wall(d, k)
        row = {"temperature": temp, "k": k, "draft": name, "target_s": base_s, "spec_s": s,
               "target_tokens": base_toks, "spec_tokens": toks,
               "speedup": (base_s / base_toks) / (s / toks)}
        res["speed"].append(row)
        print(json.dumps(row), flush=True)
  lines = ["| T | k | alpha before | alpha after | tokens/pass before | tokens/pass after |",
           "|---|---|---|---|---|---|"]
  for r in res["table"]:
    lines.append(f"| {r['temperature']:g} | {r['k']} | {r['before']['alpha']:.3f} | "
                 f"{r['after']['alpha']:.3f} | {r['before']['tokens_per_pass']:.2f} | "
                 f"{r['after']['tokens_per_pass']:.2f} |")
  for r in res["table"]:
    if r["k"] != FLAGS.category_k:
      continue
    lines += ["", f"Per category, T = {r['temperature']:g}, k = {r['k']} ({label}):", "",
              "| category | prompts | alpha before | alpha after | tokens/pass before | "
              "tokens/pass after |", "|---|---|---|---|---|---|"]
    for c, v in r["by_category"].items():
      b, a = v["before"], v["after"]
      lines.append(f"| {c} | {len(cats[c])} | {b['alpha']:.3f} | {a['alpha']:.3f} | "
                   f"{b['tokens_per_pass']:.2f} | {a['tokens_per_pass']:.2f} |")
  lines += ["", "| T | k | draft | speedup vs target alone (batch 1) |", "|---|---|---|---|"]
  for r in res["speed"]:
    lines.append(f"| {r['temperature']:g} | {r['k']} | {r['draft']} | {r['speedup']:.2f}x |")
  res["markdown"] = "\n".join(lines)
  print(res["markdown"])
  if FLAGS.out:
    os.makedirs(os.path.dirname(os.path.abspath(FLAGS.out)), exist_ok=True)
    with open(FLAGS.out, "w", encoding="utf-8") as f:
      json.dump(res, f, indent=1)


if __name__ == "__main__":
  app.run(main)
