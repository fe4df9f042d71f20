"""The speculative-decoding card: target alone vs target + draft on one prompt."""
from __future__ import annotations

import os
from typing import Any, Optional

from absl import logging
import numpy as np

from specjax import compile_cache, parallel
from specjax.api import generate
from specjax.api.draft_spec import is_kind_spec, lookup_first, resolve_drafter
from specjax.apps.timing import best_of
from specjax.decoding.compiled import compile_totals
from specjax.errors import LoadError
from specjax.loading import load_model, registry
from specjax.tune import costs


def load_draft(source: str, fallback: str = "", target=None,
               **load_kw) -> tuple[str, Any, Optional[str]]:
  """(label, draft, warning): a loaded model, a drafter spec ("ngram:3"), or None for no
  draft; warning is None unless the fallback was used. load_kw (mesh, dtype) go to load_model.

  Only a registry name that cannot be loaded on this machine (a shipped draft missing
  from an install, say) falls back to `fallback`, and the card then prints a warning
  line saying so. Anything else that cannot be loaded (a mistyped name or path, a bad
  spec) raises: the card never silently measures another drafter than the one asked for.
  `target` (loaded) is reused by a draft that shares its embeddings.
  """
  if not source:
    return "none", None, None
  base, plus, lookup = source.rpartition("+")
  if plus:  # "<draft>+ngram:N": the base loaded once (mesh, dtype), the lookup put in front
    label, draft, warning = load_draft(base, fallback, target, **load_kw)
    if warning is not None:  # the base fell back: measure the fallback alone, as warned
      return label, draft, warning
    return source, lookup_first(draft, lookup, target, source), None
  if is_kind_spec(source) or (":" in source and not os.path.exists(os.path.expanduser(source))):
    return source, resolve_drafter(source, target), None  # the grammar checks it, before any work
  try:
    return source, load_model(source, target=target, **load_kw), None
  except LoadError as e:
    if not fallback or source not in registry.REGISTRY:
      raise
    warning = (f"draft {source!r} could not be loaded here ({e}); measured {fallback!r} "
               "instead")
    logging.warning("%s", warning)
    return fallback, load_draft(fallback, target=target, **load_kw)[1], warning


def run_card(config) -> dict:
  """Loads, runs both decoders with identical settings, returns the card's fields.

  config.mesh ("" = one device, else e.g. "1,8" or "data=2,model=4") and config.dtype
  place target and draft on a ("data", "model") mesh (`specjax.parallel`).
  compile_*: what this card's decoding loops compiled (`specjax.decoding.compiled`)."""
  compiled_before = compile_totals()
  mesh = parallel.make_mesh(config.mesh) if config.get("mesh") else None
  dtype = config.get("dtype", "float32")
  target = load_model(config.target, mesh=mesh, dtype=dtype)
  draft_label, draft, warning = load_draft(config.draft, config.fallback_draft, target,
                                           mesh=mesh, dtype=dtype)
  draft = resolve_drafter(draft, target)  # once: every run below reuses this drafter
  prompt = target.encode(config.prompt, chat=config.chat)
  common = dict(max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                top_k=config.top_k, top_p=config.top_p, seed=config.seed)
  k = str(config.k).strip()  # an ml_collections string field: "auto" or a number
  if k != "auto" and not k.lstrip("-").isdigit():
    raise ValueError(f"config.k={config.k!r}: give 'auto' or the number of tokens drafted per "
                     "round (an integer >= 1).")
  k = k if k == "auto" else int(k)
  tree = str(config.get("tree", "") or "").strip() or None
  if tree is not None and (k == "auto" or draft is None):
    raise ValueError(f"config.tree={tree!r} needs a draft and config.k as a number: the "
                     "tree's depth (at most, for 'auto'), e.g. --config.k=4; k='auto' "
                     "chooses among chains only.")
  choice = None
  if k == "auto" and draft is not None:  # choose once (printed), then time that k
    choice = generate(target, [prompt], draft=draft, k="auto", **common).k_choice
    k = choice["k"]
  # k = 0 from "auto": no k pays at this batch, the target alone (a k given as 0 is refused
  # by generate, as any k < 1)
  run_draft = None if choice is not None and k == 0 else draft
  # tree="auto" chooses (and prints) in the first run, and the process keeps that choice
  spec = best_of(config.repeats, target, [prompt], draft=run_draft, k=k, tree=tree, **common)
  s = spec.stats
  k = s.k  # tree="auto" may choose a shallower tree, or a chain
  card = {
      "target": config.target, "draft": draft_label, "k": k, "k_auto": str(config.k) == "auto",
      "tree": s.tree, "tree_auto": tree == "auto",
      "nodes_per_round": s.nodes_per_round,
      "temperature": config.temperature, "prompt": config.prompt, "output": spec.texts[0],
      "prompt_tokens": len(prompt), "new_tokens": int(s.new_tokens.sum()),
      "target_passes": int(s.target_passes.sum()), "draft_passes": int(s.draft_passes.sum()),
      "acceptance_rate": s.to_dict()["acceptance_rate"],
      "per_position_acceptance": s.to_dict()["per_position_acceptance"],
      "tokens_per_pass": s.to_dict()["tokens_per_pass"],
      "closed_form_tokens_per_pass": s.closed_form_tokens_per_pass,
      "speculative_tokens_per_s": s.tokens_per_s, "speculative_time_s": s.wall_time_s,
      "identical_to_target": None, "speedup": None, "warning": warning,
      # k="auto": what it chose from (a note naming k or "target alone"), its prediction
      "k_note": None if choice is None else choice["note"],
      "predicted_speedup": None if choice is None else choice["predicted"],
      "calibration_s": None if choice is None else choice["calibration_s"],
  }
  if config.check_target:
    base = best_of(config.repeats, target, [prompt], **common)
    card["target_tokens_per_s"] = base.stats.tokens_per_s
    card["target_time_s"] = base.stats.wall_time_s
    card["identical_to_target"] = bool(spec.tokens == base.tokens)
    # Time per generated token, target alone over speculative (the two outputs may
    # differ in length when sampling).
    card["speedup"] = s.tokens_per_s / base.stats.tokens_per_s
    if run_draft is not None and config.get("explain", True):
      if s.tree is None:  # a tree's pass and proposal are not timed apart
        card.update(pass_costs(target, draft, k, len(prompt), config.max_new_tokens,
                               repeats=config.repeats))
      # A round's time in target-alone steps, from the two timed runs themselves.
      per_round = s.wall_time_s / max(1, int(np.sum(s.rounds)))
      per_step = base.stats.wall_time_s / max(1, int(np.sum(base.stats.rounds)))
      card["round_in_steps"] = per_round / per_step
  card["speedup_note"] = speedup_note(card)
  card.update(compile_fields(compiled_before))
  return card


def compile_fields(before) -> dict:
  """The decoding loops' compiles since `before` (a `compile_totals()`): programs built,
  seconds in lower + compile, how many jax loaded from its persistent cache, and where
  that cache is (None: off)."""
  now = compile_totals()
  return {"compile_programs": now.programs - before.programs,
          "compile_time_s": now.seconds - before.seconds,
          "compile_from_disk": now.from_disk - before.from_disk,
          "compile_cache": compile_cache.in_use()}


def format_compile(c: dict) -> str:
  """'2 programs, 4.3 s' and where they came from: XLA, or jax's persistent cache."""
  n, disk = c["compile_programs"], c["compile_from_disk"]
  text = f"{n} program{'s' if n != 1 else ''}, {c['compile_time_s']:.1f} s"
  if c["compile_cache"] is None:
    return text + " (persistent compilation cache off)"
  return text + f" ({disk} of them loaded from the persistent cache {c['compile_cache']})"


def pass_costs(target, draft, k: int, prompt_len: int, max_new_tokens: int,
               repeats: int = 3) -> dict:
  """One round's parts timed apart as jitted calls at the run's mean context: c_step
  (a 1-token target pass), c_verify (the (k+1)-token verify pass) and c_draft (one
  proposal of k drafts), in seconds, and the verify pass's share of a round."""
  ctx, max_len = prompt_len + max_new_tokens // 2, costs.cache_len(prompt_len, max_new_tokens, k)
  tc = costs.target_costs(target, ctx, max_len, [k], n=5, repeats=repeats)
  c_draft = costs.draft_cost(target, draft, k, ctx, max_len, n=5, repeats=repeats)
  c_step, c_verify = tc["step"], tc["verify"][k]
  return {"c_step_s": c_step, "c_verify_s": c_verify, "c_draft_s": c_draft,
          "verify_share": c_verify / (c_verify + c_draft)}


def speedup_note(c: dict) -> Optional[str]:
  """One line: what the measured speedup means and where the time went, from this run.

  round_in_steps: one round's time (draft k tokens + one verify pass) over one
  target-alone step, both from the timed runs, so speedup ~ tokens_per_pass /
  round_in_steps; verify_share: the verify pass's part of a round, timed apart."""
  if c.get("speedup") is None or c.get("round_in_steps") is None:
    return None
  k, tpp, rnd = c["k"], c["tokens_per_pass"], c["round_in_steps"]
  width = k + 1 if c.get("tree") is None else c["nodes_per_round"] + 1
  rounds = c.get("target_passes", 0) - 1  # batch 1: the prefill is the other target pass
  per = c["draft_passes"] / rounds if "draft_passes" in c and rounds > 0 else k
  drafting = (f"{per:.3g} draft pass{'' if per == 1 else 'es'}"  # a parallel draft: 1
              if per != k else f"{k} draft steps")
  if c.get("verify_share") is None:  # a tree: its pass is not timed apart
    text = (f"a round (a tree of {width - 1} draft nodes, depth {k}, and one {width}-token "
            f"verify pass) took {rnd:.2f} target-alone steps of time here")
  else:
    text = (f"a round ({drafting} + one {width}-token verify pass) took {rnd:.2f} "
            f"target-alone steps of time here, {rnd * c['verify_share']:.2f} of them the "
            "verify pass")
  text += f", and kept {tpp:.2f} tokens ({tpp:.2f} / {rnd:.2f} = {tpp / rnd:.2f})"
  if c["speedup"] < 1:
    return (f"speedup below 1 = slower than the target alone: {text}; on this CPU a "
            f"{width}-token pass costs more than one 1-token step, so a round must keep more "
            f"than {rnd:.2f} tokens to pay")
  return f"speedup above 1: {text}"


def _fmt(x, spec="{:.3f}"):
  return "n/a" if x is None else spec.format(x)


def _k_line(c: dict) -> str:
  """The k, with k="auto"'s note: "2 (auto: k=2 at batch 1 (predicted 1.2x ...))", or
  "target alone (auto: target alone: no k pays at batch 1 (predicted 0.97 ...))"."""
  if not c.get("k_auto"):
    return str(c["k"])
  if c.get("k_note") is None:  # no draft: nothing was chosen
    return f"{c['k']} (auto)"
  return f"{c['k'] or 'target alone'} (auto: {c['k_note']})"


def format_card(c: dict) -> str:
  lines = [
      f"prompt: {c['prompt']}",
      f"output: {c['output']}",
      "",
      f"target               {c['target']}",
      f"draft                {c['draft']}",
      f"k                    {_k_line(c)}",
      *([f"tree                 {c['tree'] or 'the chain'}"
         f"{' (auto)' if c.get('tree_auto') else ''}, {c['nodes_per_round']} draft "
         f"node{'s' if c['nodes_per_round'] != 1 else ''} per round"]
        if c.get("tree") or c.get("tree_auto") else []),
      f"temperature          {c['temperature']}",
      f"new tokens           {c['new_tokens']}",
      f"target passes        {c['target_passes']} (prefill included)",
      f"draft passes         {c['draft_passes']}",
      f"acceptance rate      {_fmt(c['acceptance_rate'])}",
      f"tokens / pass        {_fmt(c['tokens_per_pass'])} "
      f"(closed form {_fmt(c['closed_form_tokens_per_pass'])})",
      f"speculative tok/s    {_fmt(c['speculative_tokens_per_s'], '{:.1f}')}",
  ]
  if c.get("target_tokens_per_s") is not None:
    lines += [
        f"target alone tok/s   {_fmt(c['target_tokens_per_s'], '{:.1f}')}",
        f"identical to target  {c['identical_to_target']}",
        f"speedup              {_fmt(c['speedup'], '{:.2f}')}x (measured in this run"
        + (f"; predicted {c['predicted_speedup']:.2f}x)" if c.get("predicted_speedup") else ")"),
    ]
  if c.get("compile_programs") is not None:
    lines.append(f"compile              {format_compile(c)}")
  if c.get("speedup_note"):
    lines.append(f"why                  {c['speedup_note']}")
  if c.get("warning"):
    lines.append(f"WARNING              {c['warning']}")
  return "\n".join(lines)
