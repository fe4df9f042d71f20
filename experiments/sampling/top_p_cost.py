"""What top-p costs: the library's sort-free rule against the sorted rule it replaced.

    python experiments/sampling/top_p_cost.py --out=experiments/sampling/top_p_cost

Times, on the embedded target's vocabulary and its own logits, `warp` at top_p = 0.95
(T = 1) for the shapes the loops warp: [32, V] (a batch-32 sampled decode step, as the
data generator runs), [1, 5, V] (a sampled verify pass at k = 4) and [1, 1, V]; and one
whole sampled decode step at batch 32 (target step, head, warp, sample) with each rule.
Both rules run interleaved in the same process (the fastest of 3 rounds of 5 calls each),
and each row checks that the two keep the same ids.
"""
import os
import sys

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("out", "experiments/sampling/top_p_cost", "Output path without extension.")
flags.DEFINE_float("top_p", 0.95, "The top-p timed.")


def sorted_top_p(logits, top_p):
  """The rule before: sort the vocabulary, cut the sorted cumulative mass."""
  import jax
  import jax.numpy as jnp
  sorted_logits = jnp.sort(logits, axis=-1)[..., ::-1]
  sorted_probs = jax.nn.softmax(sorted_logits, axis=-1)
  mass_before = jnp.cumsum(sorted_probs, axis=-1) - sorted_probs
  n_keep = jnp.sum(mass_before < top_p, axis=-1, keepdims=True)
  threshold = jnp.take_along_axis(sorted_logits, n_keep - 1, axis=-1)
  return jax.nn.softmax(jnp.where(logits < threshold, -jnp.inf, logits), axis=-1)


def main(argv):
  del argv
  sys.path.insert(0, os.getcwd())
  import jax
  import jax.numpy as jnp
  import numpy as np
  import specjax
  from specjax.apps.common import write_report
  from specjax.tune.costs import time_call
  from specjax.models.interface import as_decoder
  from specjax.sampling import SamplingParams, sample, warp
  top_p = FLAGS.top_p
  sp = SamplingParams(1.0, 0, top_p)
  rules = {"sorted": lambda x: sorted_top_p(x, top_p), "specjax": lambda x: warp(x, sp)}
  target = specjax.load_model("smollm2-135m")
  dec = as_decoder(target)
  rng = np.random.default_rng(0)
  ctx = 64
  prompt = jnp.asarray(rng.integers(0, target.cfg.vocab_size, (32, ctx)), jnp.int32)
  cache = dec.prefill(prompt, jnp.full((32,), ctx), 256)[1]
  logits32 = dec.head(dec.step(prompt[:, -1:], None, None, cache)[0])[:, 0]  # [32, V]
  cases = {"warp [32, V]": logits32, "warp [1, 5, V]": logits32[None, :5], "warp [1, 1, V]": logits32[None, :1]}
  rows = []
  fns = {r: jax.jit(f) for r, f in rules.items()}  # compiled once per shape
  for name, x in cases.items():
    kept = {r: np.asarray(fns[r](x) > 0) for r in rules}
    same = bool((kept["sorted"] == kept["specjax"]).all())
    best = {r: min(time_call(fns[r], (x,), 5, 1) for _ in range(3)) for r in rules}
    rows.append((name, best["sorted"], best["specjax"], same))
  key = jax.random.PRNGKey(0)
  tok = prompt[:, -1:]

  def step_with(rule):
    def step(d, t, c, k):
      h, c = d.step(t, None, None, c)
      return sample(k, rule(d.head(h)[:, 0])), c
    return jax.jit(step)

  steps = {r: step_with(f) for r, f in rules.items()}
  best = {r: min(time_call(steps[r], (dec, tok, cache, key), 5, 1) for _ in range(3)) for r in rules}
  rows.append(("decode step, batch 32", best["sorted"], best["specjax"], None))
  md = [f"top_p = {top_p}, T = 1, vocabulary {target.cfg.vocab_size}, {jax.devices()[0].device_kind}:", "",
        "| what | sorted rule (ms) | specjax (ms) | sorted / specjax | same ids kept |", "|---|---|---|---|---|"]
  for name, a, b, same in rows:
    md.append(f"| {name} | {1e3 * a:.1f} | {1e3 * b:.1f} | {a / b:.1f}x | {'-' if same is None else same} |")
  record = [{"what": n, "sorted_s": a, "specjax_s": b, "same_kept": s} for n, a, b, s in rows]
  write_report(FLAGS.out, record, "\n".join(md))


if __name__ == "__main__":
  app.run(main)
