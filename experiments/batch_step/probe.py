"""Loop vs floor, one process: specjax.generate's rounds against the same decode step in a
bare fori_loop (argmax fed back, cache carried), at each batch size.

    PYTHONPATH=.:scripts python experiments/batch_step/probe.py --batches=8,32 --new_tokens=48
"""
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

_BATCHES = flags.DEFINE_list("batches", ["8", "32"], "Batch sizes.")
_NEW = flags.DEFINE_integer("new_tokens", 48, "New tokens per row.")
_PROMPT = flags.DEFINE_integer("prompt_tokens", 40, "Prompt length.")
_REPS = flags.DEFINE_integer("repeats", 3, "Interleaved repetitions (best counts).")


def floor_fn(decoder, n_steps):
  """n_steps greedy decode steps of the bare forward in a fori_loop (no loop bookkeeping)."""
  from specjax import sampling as sampling_lib

  def run(decoder, tok, cache):
    def body(i, c):
      tok, cache = c
      hidden, cache = decoder.step(tok[:, None], None, None, cache)
      return sampling_lib.argmax(decoder.head(hidden))[:, 0].astype(jnp.int32), cache
    return jax.lax.fori_loop(0, n_steps, body, (tok, cache))
  return run


def main(argv):
  del argv
  import specjax
  from specjax.models import pass_options
  from specjax.models.interface import as_decoder
  target = specjax.load_model("smollm2-135m")
  decoder = as_decoder(target)
  rng = np.random.default_rng(0)
  for b in map(int, _BATCHES.value):
    prompts = [rng.integers(100, 20000, _PROMPT.value).tolist() for _ in range(b)]
    kw = dict(eos_ids=(), temperature=0.0)
    specjax.generate(target, prompts, _NEW.value, **kw)
    from specjax.decoding import plan as plan_lib
    plan = plan_lib.plan(target.cfg, _PROMPT.value, _NEW.value, 0)
    prompt, lens = plan_lib.pad_prompts(prompts, plan.bucket)
    hidden, cache = jax.jit(lambda d, p, l: d.prefill(p, l, plan.max_len))(
        decoder, jnp.asarray(prompt), jnp.asarray(lens))
    tok = jnp.asarray(prompt[:, -1])
    n_steps = _NEW.value - 1
    fl = pass_options.jit(floor_fn(decoder, n_steps), rows=b)
    jax.block_until_ready(fl(decoder, tok, cache))
    loop_t, floor_t = [], []
    for _ in range(_REPS.value):
      r = specjax.generate(target, prompts, _NEW.value, **kw)
      loop_t.append((r.stats.wall_time_s - r.stats.prefill_time_s) / int(r.stats.rounds.max()))
      t0 = time.perf_counter()
      jax.block_until_ready(fl(decoder, tok, cache))
      floor_t.append((time.perf_counter() - t0) / n_steps)
    lt, ft = min(loop_t), min(floor_t)
    print(f"batch {b}: loop {1e3*lt:.1f} ms/step, floor {1e3*ft:.1f} ms/step, "
          f"loop/floor {lt/ft:.2f}, cache {plan.max_len}", flush=True)


if __name__ == "__main__":
  app.run(main)
