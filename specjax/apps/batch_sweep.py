"""Batched decoding side by side: specjax alone against transformers' batched `generate`
and against the bare decode step (its floor), one run, per batch size.

Axes: B batch, P prompt bucket, S cache slots.

Each case is one batch of B prompts decoded greedily to exactly `max_new` tokens (no stop
ids, so every row runs the same number of steps), three ways:

  specjax       `specjax.generate(target, prompts)`: prefill, then the while_loop of rounds
  transformers  `generate` on the same token ids, left-padded (`scripts/peers.py`)
  floor         the same decode step (forward, head, argmax, cache carried) `max_new - 1`
                times in a bare `lax.fori_loop` from the same prefill and cache length:
                what the loop would cost if it did nothing beyond the forward

Cases: "short" (chat prompts of the evaluation set, cycled to B rows) at each batch size,
and "mixed" (every other row a prompt of 500..1,500 tokens, the rest short). Runs are
interleaved (every repetition runs every case and side, in rotating order) and each keeps
its fastest repetition: the 2-core CPU is shared and drifts.
"""
from __future__ import annotations

import time
from types import ModuleType
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax import prompts as prompts_lib
from specjax import sampling as sampling_lib
from specjax.decoding import plan as plan_lib
from specjax.models import pass_options
from specjax.models.interface import as_decoder

LONG_LENGTHS = (500, 1500)  # mixed case: long prompts spread evenly over this range


def short_prompts(target, n: int) -> list[list[int]]:
  """n chat prompts of the evaluation set (cycled), as token ids."""
  rows = prompts_lib.select("eval", per_category=0)
  ids = [target.encode(r["text"], chat=True) for r in rows[:max(n, 1)]]
  return [ids[i % len(ids)] for i in range(n)]


def mixed_prompts(target, n: int) -> list[list[int]]:
  """n prompts: odd rows short, even rows long (LONG_LENGTHS spread evenly), the long ones
  made of evaluation prompts' ids run together and cut to length."""
  short = short_prompts(target, n)
  pool = [t for p in short_prompts(target, 64) for t in p]
  n_long = (n + 1) // 2
  lens = np.linspace(*LONG_LENGTHS, max(n_long, 1)).astype(int)
  out = []
  for b in range(n):
    if b % 2:
      out.append(short[b])
    else:
      m = int(lens[b // 2])
      out.append([pool[i % len(pool)] for i in range(b * 37, b * 37 + m)])
  return out


def floor_program(decoder, batch: int, n_steps: int):
  """The bare decode step `n_steps` times in a fori_loop, compiled with the options the
  loop's rounds get for `batch` rows (`pass_options`). Returns the tokens [B, n_steps]."""
  def run(decoder, tok, cache):
    def body(i, carry):
      tok, cache, out = carry
      hidden, cache = decoder.step(tok[:, None], None, None, cache)  # [B, 1, D]
      tok = sampling_lib.argmax(decoder.head(hidden))[:, 0].astype(jnp.int32)  # [B]
      return tok, cache, out.at[:, i].set(tok)
    out = jnp.zeros((tok.shape[0], n_steps), jnp.int32)
    return jax.lax.fori_loop(0, n_steps, body, (tok, cache, out))[2]
  return pass_options.jit(run, rows=batch)


def floor_runner(target, prompts: list, max_new: int):
  """(run, tokens): run() times the floor for these prompts in seconds per decode step;
  tokens [B, max_new] are the floor's greedy tokens (the prefill's first one included).
  The prefill and the cache length are generate's (`plan`), done once outside the timing."""
  decoder = as_decoder(target)
  plan = plan_lib.plan(target.cfg, max(len(p) for p in prompts), max_new, 0)
  prompt, lens = plan_lib.pad_prompts(prompts, plan.bucket)
  prefill = jax.jit(lambda d, p, n: d.prefill(p, n, plan.max_len))
  hidden, cache = prefill(decoder, jnp.asarray(prompt), jnp.asarray(lens))
  rows = jnp.arange(len(prompts))
  last = decoder.head(hidden[rows, jnp.asarray(lens) - 1][:, None])  # [B, 1, V]
  tok = sampling_lib.argmax(last)[:, 0].astype(jnp.int32)
  n_steps = max(max_new - 1, 1)
  program = floor_program(decoder, len(prompts), n_steps)
  rest = np.asarray(program(decoder, tok, cache))  # compiles
  tokens = np.concatenate([np.asarray(tok)[:, None], rest], 1)[:, :max_new]

  def run():
    start = time.perf_counter()
    jax.block_until_ready(program(decoder, tok, cache))
    return (time.perf_counter() - start) / n_steps
  return run, tokens


def run_sweep(config, batches: list[int], mixed: int, peers: Optional[ModuleType] = None,
              log=print) -> dict:
  """Every case (short prompts at each of `batches`, and a mixed-length batch of `mixed`
  rows if > 0) three ways, interleaved over config.repeats; returns the rows."""
  import specjax
  from specjax.loading import load_model
  target = load_model(config.target)
  max_new = int(config.max_new_tokens)
  cases = [("short", b, short_prompts(target, b)) for b in batches]
  if mixed > 0:
    cases.append(("mixed", mixed, mixed_prompts(target, mixed)))
  hf_model = None
  if peers is not None and config.hf.enabled:
    peers.set_threads(int(config.hf.get("torch_threads", 0)))
    hf_model = peers.load_hf(config.target)
  runners, floor_tokens = {}, {}
  for name, b, prompts in cases:
    log(f"preparing {name} batch {b} (prompts of {min(map(len, prompts))}.."
        f"{max(map(len, prompts))} tokens)")
    runners[(name, b, "specjax")] = (lambda p: lambda: specjax.generate(
        target, p, max_new, eos_ids=(), temperature=0.0))(prompts)
    runners[(name, b, "floor")], floor_tokens[(name, b)] = floor_runner(target, prompts, max_new)
    if hf_model is not None:
      runners[(name, b, "transformers")] = (lambda p: lambda: peers.hf_generate_batch(
          hf_model, p, max_new))(prompts)
    runners[(name, b, "specjax")]()  # compile (and warm transformers) outside the timing
    if (name, b, "transformers") in runners:
      runners[(name, b, "transformers")]()
  best: dict = {}
  keys = list(runners)
  for rep in range(int(config.repeats)):
    for key in keys[rep % len(keys):] + keys[:rep % len(keys)]:
      out = runners[key]()
      if key[2] == "floor":
        t = out
      elif key[2] == "specjax":
        t = out.stats.wall_time_s
      else:
        t = out["wall_time_s"]
      if key not in best or t < best[key][0]:
        best[key] = (t, out)
    log(f"repetition {rep + 1}/{config.repeats} done")
  rows = []
  for name, b, prompts in cases:
    sj_t, sj = best[(name, b, "specjax")]
    steps = int(sj.stats.rounds.max())
    loop_step = (sj_t - sj.stats.prefill_time_s) / steps
    floor_step = best[(name, b, "floor")][0]
    row = {"case": name, "batch": b, "prompt_tokens": [len(p) for p in prompts],
           "new_tokens": int(sum(len(t) for t in sj.tokens)),
           "specjax_s": sj_t, "specjax_prefill_s": sj.stats.prefill_time_s,
           "specjax_tokens_per_s": sum(len(t) for t in sj.tokens) / sj_t,
           "loop_step_s": loop_step, "floor_step_s": floor_step,
           "loop_over_floor": loop_step / floor_step,
           "floor_identical": [list(map(int, t)) for t in floor_tokens[(name, b)]] == sj.tokens}
    if (name, b, "transformers") in best:
      hf_t, hf = best[(name, b, "transformers")]
      row.update(hf_s=hf_t, hf_tokens_per_s=sum(len(t) for t in hf["tokens"]) / hf_t,
                 specjax_over_hf=hf_t / sj_t * (row["new_tokens"] / sum(
                     len(t) for t in hf["tokens"])),
                 rows_identical_to_hf=sum(a == b for a, b in zip(sj.tokens, hf["tokens"])))
    rows.append(row)
  return {"config": config.to_dict(), "batches": batches, "mixed": mixed, "rows": rows}


def format_sweep(result: dict) -> str:
  """The console table of `run_sweep`."""
  f = lambda x, s="{:.2f}": "-" if x is None else s.format(x)
  head = (f"{'case':<7}{'B':>4}{'prompt toks':>13}{'specjax tok/s':>15}{'hf tok/s':>10}"
          f"{'x hf':>7}{'prefill s':>11}{'loop ms/step':>14}{'floor ms/step':>15}"
          f"{'loop/floor':>12}{'same as hf':>12}")
  lines = [head, "-" * len(head)]
  for r in result["rows"]:
    p = r["prompt_tokens"]
    lines.append(
        f"{r['case']:<7}{r['batch']:>4}{f'{min(p)}-{max(p)}':>13}"
        f"{f(r['specjax_tokens_per_s'], '{:.1f}'):>15}{f(r.get('hf_tokens_per_s'), '{:.1f}'):>10}"
        f"{f(r.get('specjax_over_hf')):>7}{f(r['specjax_prefill_s']):>11}"
        f"{f(1e3 * r['loop_step_s'], '{:.1f}'):>14}{f(1e3 * r['floor_step_s'], '{:.1f}'):>15}"
        f"{f(r['loop_over_floor']):>12}"
        f"{(str(r['rows_identical_to_hf']) + '/' + str(r['batch'])) if 'hf_s' in r else '-':>12}")
  return "\n".join(lines)
