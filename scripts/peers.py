"""The transformers side of the benchmark (PyTorch; imported only inside these functions).

It lives in scripts/, outside the specjax package, which never imports torch:
`scripts/benchmark.py` hands this module to `specjax.apps.sidebyside.run_benchmark(...,
peers=peers)` when the config asks for transformers rows.

Each `hf_generate` call decodes ONE prompt (transformers' assisted and prompt-lookup
decoding are batch-1 only) from the same token ids specjax decodes, with the same stop
ids, and records every forward call of the target (and assistant) through module
hooks: input length, cache length before the call, duration. From those records:

  rounds          target forward calls (the first one is the prefill, which in
                  assisted/prompt-lookup decoding also verifies the first candidates)
  tokens_per_pass new tokens / target calls
  offered[r]      candidates verified in call r; gained[r] tokens kept after call r
  acceptance      accepted / checked over draft positions, position i of round r
                  being checked when i < offered[r] and i <= accepted[r]
                  (the same definition as specjax's SpecStats)
  c_step          median duration of 1-token target calls after the prefill
  c_round         mean duration of the target calls after the prefill plus the
                  assistant's forward time per round
"""
from __future__ import annotations

import os
import statistics
import time
from typing import Optional, Sequence


def resolve_hf(source: str) -> tuple[str, Optional[str]]:
  """(directory, gguf file name or None) for `from_pretrained`, resolved like load_model."""
  from specjax.loading import resolve
  path = resolve(source)
  if os.path.isdir(path):
    return path, None
  return os.path.dirname(os.path.abspath(path)), os.path.basename(path)


def load_hf(source: str):
  """transformers AutoModelForCausalLM of a specjax source (registry name, dir, .gguf), fp32."""
  import torch
  import transformers
  directory, gguf = resolve_hf(source)
  kwargs = {"gguf_file": gguf} if gguf else {}
  model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                            **kwargs)
  return model.eval()


def set_threads(n: int) -> None:
  """torch intra-op threads (0: leave torch's default)."""
  if n > 0:
    import torch
    torch.set_num_threads(n)


class _Recorder:
  """Forward pre/post hooks recording (cache length, input length, seconds) per call."""

  def __init__(self, model):
    self.calls = []
    self._start = None
    self._handles = [
        model.register_forward_pre_hook(self._pre, with_kwargs=True),
        model.register_forward_hook(self._post, with_kwargs=True)]

  def _pre(self, module, args, kwargs):
    ids = kwargs.get("input_ids", args[0] if args else None)
    cached = 0  # tokens already in the cache = position of the first input token
    for key in ("position_ids", "cache_position"):
      if kwargs.get(key) is not None:
        cached = int(kwargs[key].reshape(-1)[0])
        break
    else:
      past = kwargs.get("cache", kwargs.get("past_key_values"))
      if past is not None and hasattr(past, "get_seq_length"):
        cached = int(past.get_seq_length())
    self._pending = (cached, int(ids.shape[-1]) if ids is not None else 0)
    self._start = time.perf_counter()

  def _post(self, module, args, kwargs, output):
    self.calls.append(self._pending + (time.perf_counter() - self._start,))

  def close(self):
    for h in self._handles:
      h.remove()


def hf_generate(model, prompt: Sequence[int], max_new_tokens: int, eos_ids: Sequence[int],
                mode: str = "greedy", k: int = 4, ngram: int = 3, assistant=None) -> dict:
  """Greedy `generate` of one prompt: mode "greedy", "prompt_lookup" or "assisted".

  Returns tokens, wall_time_s and the per-call records (see the module docstring).
  In "assisted" mode the assistant drafts a constant k tokens per round with no
  confidence cut-off, so k means the same as in specjax.
  """
  import torch
  input_ids = torch.tensor([list(prompt)], dtype=torch.long)
  eos = [int(e) for e in eos_ids]
  kwargs = dict(max_new_tokens=int(max_new_tokens), do_sample=False, eos_token_id=eos or None,
                pad_token_id=eos[0] if eos else 0, attention_mask=torch.ones_like(input_ids),
                num_beams=1, top_k=None, top_p=None, temperature=None)
  if mode == "prompt_lookup":
    kwargs.update(prompt_lookup_num_tokens=int(k), max_matching_ngram_size=int(ngram))
  elif mode == "assisted":
    if assistant is None:
      raise ValueError("mode='assisted' needs an assistant model.")
    gc = assistant.generation_config
    gc.num_assistant_tokens = int(k)
    gc.num_assistant_tokens_schedule = "constant"
    gc.assistant_confidence_threshold = 0.0
    kwargs.update(assistant_model=assistant)
  elif mode != "greedy":
    raise ValueError(f"Unknown transformers mode {mode!r}.")
  rec = _Recorder(model)
  arec = _Recorder(assistant) if mode == "assisted" else None
  try:
    with torch.inference_mode():
      start = time.perf_counter()
      out = model.generate(input_ids, **kwargs)
      wall = time.perf_counter() - start
  finally:
    rec.close()
    if arec is not None:
      arec.close()
  tokens = out[0, input_ids.shape[1]:].tolist()
  return {"tokens": tokens, "wall_time_s": wall, "calls": rec.calls,
          "assistant_calls": arec.calls if arec else [], "prompt_len": len(prompt), "k": k}


def round_stats(run: dict) -> dict:
  """Acceptance counters of one `hf_generate` record (see the module docstring)."""
  calls, p_len, k = run["calls"], run["prompt_len"], run["k"]
  final_len = p_len + len(run["tokens"])
  starts = [p_len] + [c[0] + 1 for c in calls[1:]]  # sequence length before each call
  ends = starts[1:] + [final_len]
  checked, accepted = [0] * k, [0] * k
  for (cached, n_in, _), s, e in zip(calls, starts, ends):
    offered = cached + n_in - s
    acc = max(0, min(e - s - 1, offered))
    for i in range(min(offered, k)):
      checked[i] += int(i <= acc)
      accepted[i] += int(i < acc)
  return {"checked": checked, "accepted": accepted, "target_calls": len(calls)}


def summarize(runs: list[dict]) -> dict:
  """Totals over prompts: new tokens, time, tokens/pass, alpha, per-pass costs."""
  new = sum(len(r["tokens"]) for r in runs)
  wall = sum(r["wall_time_s"] for r in runs)
  k = runs[0]["k"] if runs else 0
  checked, accepted, calls = [0] * k, [0] * k, 0
  steps, rounds_t, assistant_t, n_rounds = [], 0.0, 0.0, 0
  for r in runs:
    s = round_stats(r)
    calls += s["target_calls"]
    checked = [a + b for a, b in zip(checked, s["checked"])]
    accepted = [a + b for a, b in zip(accepted, s["accepted"])]
    later = r["calls"][1:]
    steps += [d for (_, n, d) in later if n == 1]
    rounds_t += sum(d for (_, _, d) in later)
    n_rounds += len(later)
    assistant_t += sum(d for (_, _, d) in r["assistant_calls"])
  total_checked = sum(checked)
  return {
      "new_tokens": new, "wall_time_s": wall, "tokens_per_s": new / wall if wall else None,
      "target_passes": calls, "tokens_per_pass": new / calls if calls else None,
      "acceptance_rate": sum(accepted) / total_checked if total_checked else None,
      "per_position_acceptance": [a / c if c else None for a, c in zip(accepted, checked)],
      "c_step": statistics.median(steps) if steps else None,
      "c_round": rounds_t / n_rounds + assistant_t / calls if n_rounds else None,
      "assistant_time_s": assistant_t,
  }


def hf_generate_batch(model, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                      pad_id: int = 0) -> dict:
  """Greedy `generate` of a batch of prompts, left-padded with an attention mask, exactly
  `max_new_tokens` new tokens a row (no stop ids). Returns tokens (per row) and wall_time_s."""
  import torch
  width = max(len(p) for p in prompts)
  ids = torch.full((len(prompts), width), int(pad_id), dtype=torch.long)
  mask = torch.zeros((len(prompts), width), dtype=torch.long)
  for b, p in enumerate(prompts):
    ids[b, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
    mask[b, width - len(p):] = 1
  with torch.inference_mode():
    start = time.perf_counter()
    out = model.generate(ids, attention_mask=mask, max_new_tokens=int(max_new_tokens),
                         min_new_tokens=int(max_new_tokens), do_sample=False, eos_token_id=None,
                         pad_token_id=int(pad_id), num_beams=1, top_k=None, top_p=None,
                         temperature=None)
    wall = time.perf_counter() - start
  return {"tokens": out[:, width:].tolist(), "wall_time_s": wall}
