"""A/B of decode-step variants in one process: the bare greedy decode step (forward, head,
argmax, cache carried) in a fori_loop, compiled once per variant and timed interleaved.

    PYTHONPATH=.:scripts python experiments/batch_step/variants.py --batch=32 --variants=base,noynn
"""
import contextlib
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

_BATCH = flags.DEFINE_integer("batch", 32, "Rows.")
_STEPS = flags.DEFINE_integer("steps", 8, "Decode steps per timed call.")
_PROMPT = flags.DEFINE_integer("prompt_tokens", 40, "Prompt length.")
_CACHE = flags.DEFINE_integer("cache", 128, "Cache length.")
_REPS = flags.DEFINE_integer("repeats", 5, "Interleaved repetitions (best counts).")
_VARIANTS = flags.DEFINE_list("variants", ["base"], "Variant names (see VARIANTS).")

from specjax.models import transformer as T  # noqa: E402
from specjax.models import pass_options  # noqa: E402


def norm_dot(p, cfg, x):
  xf = x.astype(jnp.float32)
  ones = jnp.full((x.shape[-1], 1), 1.0 / x.shape[-1], jnp.float32)
  y = xf * jax.lax.rsqrt((xf * xf) @ ones + cfg.norm_eps)
  return (y * p["scale"]).astype(x.dtype)


def dense_decode_attention(q, keys, values, positions):
  """T small: one dense softmax over all slots (masked past each row's position)."""
  b, t, h, e = q.shape
  kh, s = values.shape[1], values.shape[2]
  g = h // kh
  qg = jnp.moveaxis(q.reshape(b, t, kh, g, e), 1, 3).reshape(b, kh, g * t, e)
  qg = qg.astype(jnp.float32) / jnp.sqrt(jnp.float32(e))
  qpos = jnp.broadcast_to(positions[:, None, :], (b, g, t)).reshape(b, 1, g * t)
  scores = jnp.einsum("bkme,bkes->bkms", qg, keys)
  mask = jnp.arange(s)[None, None, None, :] <= qpos[..., None]
  scores = jnp.where(mask, scores, -jnp.inf)
  w = jax.nn.softmax(scores, axis=-1)
  out = jnp.einsum("bkms,bkse->bkme", w, values).reshape(b, kh, g, t, e)
  return jnp.moveaxis(out, 3, 1).reshape(b, t, h * e).astype(q.dtype)


def halving_max(x):
  """max over the last axis by elementwise maxima of halves (no reduce op)."""
  while x.shape[-1] > 1:
    n = x.shape[-1]
    if n % 2:
      x = jnp.concatenate([x, x[..., -1:]], -1)
      n += 1
    x = jnp.maximum(x[..., :n // 2], x[..., n // 2:])
  return x[..., 0]


def oneblock_attention(q, keys, values, positions, max_fn=lambda s: s.max(-1), sum_dot=False):
  """The whole cache as one block (no inner loop), softmax by max and sum."""
  b, t, h, e = q.shape
  kh, s = values.shape[1], values.shape[2]
  g = h // kh
  qg = jnp.moveaxis(q.reshape(b, t, kh, g, e), 1, 3).reshape(b, kh, g * t, e)
  qg = qg.astype(jnp.float32) / jnp.sqrt(jnp.float32(e))
  qpos = jnp.broadcast_to(positions[:, None, :], (b, g, t)).reshape(b, 1, g * t)
  scores = jnp.einsum("bkme,bkes->bkms", qg, keys)
  mask = jnp.arange(s)[None, None, None, :] <= qpos[..., None]
  scores = jnp.where(mask, scores, -jnp.inf)
  w = jnp.exp(scores - max_fn(scores)[..., None])
  acc = jnp.einsum("bkms,bkse->bkme", w, values)
  l = (w @ jnp.ones((s, 1), jnp.float32))[..., 0] if sum_dot else w.sum(-1)
  out = (acc / l[..., None]).reshape(b, kh, g, t, e)
  return jnp.moveaxis(out, 3, 1).reshape(b, t, h * e).astype(q.dtype)


def oneblock_nored(q, keys, values, positions):
  return oneblock_attention(q, keys, values, positions, halving_max, True)


def no_attention(q, keys, values, positions):
  """Measurement only: attention replaced by the query itself (what attention costs)."""
  return q.reshape(q.shape[0], q.shape[1], -1)


def no_head(params, cfg, hidden):
  """Measurement only: the head replaced by the hidden state itself (what the head costs)."""
  return hidden.astype(jnp.float32)


OFF = {"xla_cpu_experimental_ynn_fusion_type": ""}
VARIANTS = {
    "base": (None, {}),
    "ynn_default": ({}, {}),
    "noynn": (OFF, {}),
    "norm_dot": (None, {"norm": norm_dot}),
    "dense_attn": (None, {"live_attention": dense_decode_attention}),
    "oneblock": (None, {"live_attention": oneblock_attention}),
    "oneblock_nored": (None, {"live_attention": oneblock_nored}),
    "nored_all": (None, {"live_attention": oneblock_nored, "norm": norm_dot}),
    "noattn": (None, {"live_attention": no_attention}),
    "nohead": (None, {"head": no_head}),
    "head_dot": (None, {"_HEAD_REDUCE_MAX_ROWS": 0}),
    "noynn_head_dot": (OFF, {"_HEAD_REDUCE_MAX_ROWS": 0}),
}


@contextlib.contextmanager
def patched(patches):
  old = {n: getattr(T, n) for n in patches}
  for n, v in patches.items():
    setattr(T, n, v)
  try:
    yield
  finally:
    for n, v in old.items():
      setattr(T, n, v)


def build(decoder, options, patches, tok, cache):
  from specjax import sampling as sampling_lib
  n = _STEPS.value

  def run(decoder, tok, cache):
    def body(i, c):
      tok, cache = c
      hidden, cache = decoder.step(tok[:, None], None, None, cache)
      return sampling_lib.argmax(decoder.head(hidden))[:, 0].astype(jnp.int32), cache
    return jax.lax.fori_loop(0, n, body, (tok, cache))
  if options is None:
    options = pass_options.few_row_options(_BATCH.value)
  with patched(patches):
    lowered = jax.jit(run).lower(decoder, tok, cache)
  return lowered.compile(compiler_options=options) if options else lowered.compile()


def main(argv):
  del argv
  import specjax
  from specjax.decoding import plan as plan_lib
  from specjax.models.interface import as_decoder
  target = specjax.load_model("smollm2-135m")
  decoder = as_decoder(target)
  b = _BATCH.value
  rng = np.random.default_rng(0)
  prompts = [rng.integers(100, 20000, _PROMPT.value).tolist() for _ in range(b)]
  prompt, lens = plan_lib.pad_prompts(prompts, plan_lib.prompt_bucket(_PROMPT.value))
  _, cache = jax.jit(lambda d, p, l: d.prefill(p, l, _CACHE.value))(
      decoder, jnp.asarray(prompt), jnp.asarray(lens))
  tok = jnp.asarray(prompt[:, 0])
  progs, outs = {}, {}
  for name in _VARIANTS.value:
    opts, patches = VARIANTS[name]
    t0 = time.perf_counter()
    progs[name] = build(decoder, opts, patches, tok, cache)
    outs[name] = np.asarray(progs[name](decoder, tok, cache)[0])
    print(f"compiled {name} in {time.perf_counter() - t0:.1f}s", flush=True)
  times = {n: [] for n in progs}
  cpu = {n: [] for n in progs}
  for r in range(_REPS.value):
    for name in list(progs)[r % len(progs):] + list(progs)[:r % len(progs)]:
      t0, c0 = time.perf_counter(), time.process_time()
      jax.block_until_ready(progs[name](decoder, tok, cache))
      times[name].append((time.perf_counter() - t0) / _STEPS.value)
      cpu[name].append((time.process_time() - c0) / _STEPS.value)
  base = min(times[_VARIANTS.value[0]])
  cbase = np.median(cpu[_VARIANTS.value[0]])
  for name in progs:
    print(f"  cpu {name:<16} median {1e3 * np.median(cpu[name]):7.1f} ms/step x{np.median(cpu[name]) / cbase:.2f}")
    same = bool((outs[name] == outs[_VARIANTS.value[0]]).all())
    print(f"batch {b} {name:<16} {1e3 * min(times[name]):7.1f} ms/step  x{min(times[name]) / base:.2f}"
          f"  same tokens: {same}", flush=True)


if __name__ == "__main__":
  app.run(main)
