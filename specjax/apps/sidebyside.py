"""Side-by-side benchmark: specjax and transformers, target alone and speculative.

One run, same prompts (token ids), same stop ids, greedy, batch 1 per prompt. Rows:

  specjax      target                     the target alone (baseline of its framework)
  specjax      <drafter>                  each drafter of `config.drafters`
  transformers greedy                     `generate` (baseline of its framework)
  transformers prompt_lookup              `prompt_lookup_num_tokens=k`
  transformers assisted                   `assistant_model=` the exported draft
  specjax      <drafter> [<tree>]         with `config.trees`: each drafter that drafts
                                          token trees, once per tree (same k)

Measurements are interleaved: every repetition runs every row on every prompt, the
row order rotating between repetitions, and each (row, prompt) keeps its fastest run,
because the 2-core CPU is shared and noisy. Definitions of every field are in
`ROW_FIELDS` and in experiments/benchmark/README.md.
"""
from __future__ import annotations

import os
import platform
from types import ModuleType
from typing import Optional

from absl import logging

from specjax import prompts as prompts_lib
from specjax.apps import common
from specjax.api.draft_spec import is_kind_spec
from specjax.tune import costs
from specjax.decoding import tree as tree_lib

ROW_FIELDS = {
    "framework": "specjax or transformers",
    "row": "target | drafter spec/source | greedy | prompt_lookup | assisted",
    "tokens_per_s": "new tokens / decode seconds, summed over prompts (fastest repetition each)",
    "speedup": "tokens_per_s / tokens_per_s of the same framework's target-alone row",
    "vs_hf_greedy": "tokens_per_s / tokens_per_s of transformers greedy generate",
    "acceptance_rate": "alpha: accepted / checked draft positions (position i is checked "
                       "when drafts 0..i-1 were accepted)",
    "tokens_per_pass": "new tokens per verify pass (specjax: (accepted + rounds) / rounds; "
                       "transformers: new tokens / target forward calls)",
    "closed_form_tokens_per_pass": "(1 - alpha^(k+1)) / (1 - alpha)",
    "c_step": "seconds of one 1-token target forward",
    "c_round": "seconds of one round's forward work: c_draft(k) + c_verify(k)",
    "ideal_speedup": "tokens_per_pass * c_step / c_round: the speedup if the decode loop "
                     "cost nothing beyond the forward passes",
    "ideal_speedup_closed_form": "the same with the closed form from alpha in place of "
                                 "the measured tokens_per_pass",
    "fraction_of_ideal": "speedup / ideal_speedup",
    "identical_to_base": "greedy output equals the same framework's target-alone output "
                         "on every prompt",
}
TREE_ROW_FIELDS = {  # with config.trees only
    "drafter": "the drafter of a specjax row (row = drafter, plus ' [tree]' for a tree row)",
    "tree": "'chain', the token tree's spec ('static:4,2,1,1', 'dynamic:16'), or None for "
            "target-alone and transformers rows",
    "tree_shape": "the tree as generate built it (None for a chain)",
    "nodes_per_round": "draft nodes the target verifies per round (k for a chain)",
    "path_lengths": "[k+1]: verify passes that accepted n drafts (the accepted path's length)",
    "mean_accepted_path": "accepted drafts per verify pass",
    "per_depth_acceptance": "P(a node of depth i+1 accepted | depth i reached), i = 0..k-1",
    "per_rank_acceptance": "[k][R]: P(the r-th child accepted | reached and ranks < r rejected)",
    "c_round": "tree rows: costs.specjax.c_draft_tree[row] (one timed propose_tree) + "
               "c_verify_tree[tree] (one target pass over the tree's N + 1 nodes)",
}


def _spec_row(framework, name, k, stats_or_summary, base_tps, hf_tps):
  d = stats_or_summary
  return {"framework": framework, "row": name, "k": k, "new_tokens": d["new_tokens"],
          "wall_time_s": d["wall_time_s"], "tokens_per_s": d["tokens_per_s"],
          "speedup": common.ratio(d["tokens_per_s"], base_tps),
          "vs_hf_greedy": common.ratio(d["tokens_per_s"], hf_tps),
          "acceptance_rate": d.get("acceptance_rate"),
          "per_position_acceptance": d.get("per_position_acceptance"),
          "tokens_per_pass": d.get("tokens_per_pass")}


def run_benchmark(config, progress: bool = True, peers: Optional[ModuleType] = None) -> dict:
  """Runs every row on every prompt (interleaved, best of config.repeats); returns results.

  peers: the transformers side (`scripts/peers.py`: load_hf, hf_generate, summarize,
  resolve_hf, set_threads), which imports torch and so lives outside the library; without
  it the transformers rows are skipped with a note.
  """
  import specjax
  from specjax.decoding.stats import expected_tokens_per_pass
  from specjax.loading import load_model
  from tqdm import tqdm

  k, max_new = int(config.k), int(config.max_new_tokens)
  target = load_model(config.target)
  rows = prompts_lib.select(config.prompts.source, config.prompts.per_category,
                            prompts_lib.parse_list(config.prompts.categories),
                            prompts_lib.parse_list(config.prompts.get("ids", "")))
  ids = [target.encode(r["text"], chat=config.prompts.chat) for r in rows]
  drafts, skipped = common.load_drafts(prompts_lib.parse_list(config.drafters), config.allow_hub,
                                        target)
  trees = list(common.parse_trees(config.get("trees", ""), [k]))  # specs, all of depth k

  # The runners: name -> callable(prompt index) -> (tokens, wall seconds, raw result).
  runners = {("specjax", "target"): lambda i: specjax.generate(target, [ids[i]], max_new)}
  tree_of = {}  # specjax drafter rows: name -> (drafter label, tree spec or None)
  for label, d in drafts.items():
    runners[("specjax", label)] = (lambda d: lambda i: specjax.generate(
        target, [ids[i]], max_new, draft=d, k=k))(d)
    tree_of[("specjax", label)] = (label, None)
  for label, d in drafts.items():
    for tree in trees:
      note = common.tree_note(d, target, label, tree)
      if note:
        skipped.append({"row": f"{label} [{tree}]", "note": note})
        continue
      runners[("specjax", f"{label} [{tree}]")] = (lambda d, tree: lambda i: specjax.generate(
          target, [ids[i]], max_new, draft=d, k=k, tree=tree))(d, tree)
      tree_of[("specjax", f"{label} [{tree}]")] = (label, tree)

  if config.hf.enabled and peers is None:
    skipped.append({"row": "transformers/*", "note": "no peer module given (scripts/peers.py; "
                    "scripts/benchmark.py passes it); transformers rows skipped"})
  elif config.hf.enabled:
    peers.set_threads(int(config.hf.get("torch_threads", 0)))
    try:
      hf_target = peers.load_hf(config.target)
    except Exception as e:  # noqa: BLE001 - any failure of the peer only skips its rows
      hf_target = None
      skipped.append({"row": "transformers/*", "note": f"transformers could not load "
                      f"{config.target!r}: {type(e).__name__}: {e}"})
    if hf_target is not None:
      hf = lambda mode, a=None: lambda i: peers.hf_generate(
          hf_target, ids[i], max_new, target.eos_ids, mode=mode, k=k,
          ngram=config.hf.max_matching_ngram_size, assistant=a)
      runners[("transformers", "greedy")] = hf("greedy")
      runners[("transformers", "prompt_lookup")] = hf("prompt_lookup")
      assistant, note = _hf_assistant(config, drafts, peers)
      if assistant is not None:
        runners[("transformers", "assisted")] = hf("assisted", assistant)
      else:
        skipped.append({"row": "transformers/assisted", "note": note})

  # Interleaved measurement, fastest run per (row, prompt).
  best: dict = {}
  names = list(runners)
  total = int(config.repeats) * len(ids) * len(names)
  bar = tqdm(total=total, desc="benchmark", disable=not progress)
  for rep in range(int(config.repeats)):
    order = names[rep % len(names):] + names[:rep % len(names)]
    for i in range(len(ids)):
      for name in order:
        out = runners[name](i)
        wall = out.stats.wall_time_s if name[0] == "specjax" else out["wall_time_s"]
        if (name, i) not in best or wall < best[(name, i)][0]:
          best[(name, i)] = (wall, out)
        bar.update(1)
  bar.close()

  # Per-pass costs: specjax from jitted calls, transformers from the runs' own forward calls.
  mean_len = int(sum(len(p) for p in ids) / len(ids))
  specs = {t: tree_lib.parse_tree(t, k) for t in trees}
  width = max([k] + [spec.slots - 1 for spec in specs.values()])  # draft slots of a round
  ctx_len = mean_len + max_new // 2
  max_len = costs.cache_len(max(len(p) for p in ids), max_new, width)
  cost = {"context_len": ctx_len, "cache_len": max_len, "specjax": {}, "transformers": {}}
  if config.costs.enabled:
    tc = costs.target_costs(target, ctx_len, max_len,
                            [k] + [spec.n_nodes for spec in specs.values()], n=config.costs.n,
                            repeats=config.costs.repeats)
    cost["specjax"] = {"c_step": tc["step"], "c_verify": tc["verify"][k], "c_draft": {}}
    for label, d in drafts.items():
      cost["specjax"]["c_draft"][label] = costs.draft_cost(
          target, d, k, ctx_len, max_len, n=config.costs.n, repeats=config.costs.repeats)
    if trees:
      cost["specjax"]["c_verify_tree"] = {t: tc["verify"][spec.n_nodes]
                                          for t, spec in specs.items()}
      cost["specjax"]["c_draft_tree"] = {
          name[1]: costs.draft_cost(target, drafts[label], k, ctx_len, max_len,
                                    n=config.costs.n, repeats=config.costs.repeats,
                                    tree=specs[tree])
          for name, (label, tree) in tree_of.items() if tree is not None}

  results = []
  base_tokens = {}
  for name in names:
    outs = [best[(name, i)][1] for i in range(len(ids))]
    if name[0] == "specjax":
      st = common.merge_stats([o.stats for o in outs])
      d = st.to_dict()
      if trees and name in tree_of:
        d.update(common.tree_fields(st))
      toks = [o.tokens[0] for o in outs]
    else:
      d = peers.summarize(outs)
      toks = [o["tokens"] for o in outs]
    if name[1] in ("target", "greedy"):
      base_tokens[name[0]] = toks
    d["tokens"] = toks
    d["by_category"] = {}
    for cat in dict.fromkeys(r["category"] for r in rows):
      idx = [i for i, r in enumerate(rows) if r["category"] == cat]
      if name[0] == "specjax":
        sub = common.merge_stats([outs[i].stats for i in idx]).to_dict()
      else:
        sub = peers.summarize([outs[i] for i in idx])
      d["by_category"][cat] = {key: sub[key] for key in (
          "new_tokens", "wall_time_s", "tokens_per_s", "acceptance_rate", "tokens_per_pass")}
    results.append((name, d))

  base_tps = {fw: d["tokens_per_s"] for (fw, r), d in results if r in ("target", "greedy")}
  hf_tps = base_tps.get("transformers")
  table = []
  for (fw, r), d in results:
    is_base = r in ("target", "greedy")
    row = _spec_row(fw, r, 0 if is_base else k, d, base_tps.get(fw), hf_tps)
    label, tree = tree_of.get((fw, r), (None, None))
    if trees:
      row["drafter"] = label
      row["tree"] = None if label is None else (tree or "chain")
      for key in ("tree_shape", "nodes_per_round", "path_lengths", "mean_accepted_path",
                  "per_depth_acceptance", "per_rank_acceptance"):
        row[key] = d.get(key)
    row["identical_to_base"] = d["tokens"] == base_tokens.get(fw)
    row["same_as_specjax_target"] = sum(
        a == b for a, b in zip(d["tokens"], base_tokens.get("specjax", []))) / len(ids)
    alpha = row["acceptance_rate"]
    row["closed_form_tokens_per_pass"] = (None if is_base or alpha is None
                                          else expected_tokens_per_pass(alpha, k))
    c_step = c_round = None
    if fw == "specjax" and cost["specjax"]:
      c_step = cost["specjax"]["c_step"]
      if tree is not None:
        c_round = (cost["specjax"]["c_verify_tree"][tree]
                   + cost["specjax"]["c_draft_tree"].get(r, 0.0))
      else:
        c_round = (c_step if is_base else
                   cost["specjax"]["c_verify"] + cost["specjax"]["c_draft"].get(r, 0.0))
    elif fw == "transformers":
      c_step = next((dd.get("c_step") for (f2, r2), dd in results
                     if f2 == "transformers" and r2 == "greedy"), None)
      c_round = c_step if is_base else d.get("c_round")
    row["c_step"], row["c_round"] = c_step, c_round
    tpp = 1.0 if is_base else row["tokens_per_pass"]
    row["ideal_speedup"] = costs.ideal_speedup(tpp, c_step, c_round, 0.0) if c_round else None
    row["ideal_speedup_closed_form"] = (
        costs.ideal_speedup(row["closed_form_tokens_per_pass"], c_step, c_round, 0.0)
        if c_round and not is_base else None)
    row["fraction_of_ideal"] = common.ratio(row["speedup"], row["ideal_speedup"])
    row["loop_efficiency"] = (row["tokens_per_s"] * c_round / tpp
                              if c_round and tpp and row["tokens_per_s"] else None)
    base_d = next(dd for (f2, r2), dd in results if f2 == fw and r2 in ("target", "greedy"))
    row["by_category"] = d["by_category"]
    for cat, c in row["by_category"].items():
      c["speedup"] = common.ratio(c["tokens_per_s"], base_d["by_category"][cat]["tokens_per_s"])
    table.append(row)

  return {"config": config.to_dict(), "prompts": rows,
          "prompt_tokens": [len(p) for p in ids], "costs": cost, "rows": table,
          "skipped": skipped, "fields": {**ROW_FIELDS, **(TREE_ROW_FIELDS if trees else {})},
          "machine": {"platform": platform.platform(), "processor": platform.processor(),
                      "python": platform.python_version()}}


def _hf_assistant(config, drafts: dict, peers):
  """(transformers assistant model or None, note): config.hf.assistant or the draft's export."""
  from specjax.loading import registry
  # A shipped draft's registry name has a "-hf" twin: the full Hugging Face export.
  candidates = [config.hf.assistant] if config.hf.assistant else [
      name + "-hf" if name + "-hf" in registry.REGISTRY else name
      for name in drafts if not is_kind_spec(name) and "+" not in name and ":" not in name]
  if not candidates:
    return None, ("no model draft available (the default draft is not registered and "
                  "config.hf.assistant is empty); transformers assisted generation skipped")
  for source in candidates:
    try:
      directory, gguf = peers.resolve_hf(source)
    except Exception as e:  # noqa: BLE001
      logging.warning("assistant %s: %s", source, e)
      continue
    if gguf is None and _is_feature_asset(directory):
      logging.warning("assistant %s: a feature (EAGLE-style) draft has no transformers form", source)
      continue
    if gguf is None and os.path.isfile(os.path.join(directory, "config.json")):
      try:
        return peers.load_hf(source), ""
      except Exception as e:  # noqa: BLE001
        return None, f"transformers could not load the exported draft {directory}: {e}"
  return None, (f"no Hugging Face export found for {candidates} (need a directory with "
                "config.json; write one with scripts/export_hf.py --hf_dir and set "
                "--config.hf.assistant=DIR); transformers assisted generation skipped")


def _is_feature_asset(directory: str) -> bool:
  """A shipped feature draft (reads the target's hidden states; no transformers form)."""
  from specjax.loading.hf import read_draft_meta
  return (read_draft_meta(directory) or {}).get("kind") == "feature"


def _f(x, spec="{:.2f}"):
  return "-" if x is None else spec.format(x)


def format_table(result: dict) -> str:
  """The console table of `run_benchmark`'s rows, plus skipped rows and notes; with trees
  a tree column and the nodes verified per round."""
  trees = any("tree" in r for r in result["rows"])
  tcol = lambda r: (f"{(r['tree'] or '-')[:19]:<20}{r['nodes_per_round'] or '-':>6}  "
                    if trees else "")
  name = lambda r: (r.get("drafter") or r["row"]) if trees else r["row"]
  head = (f"{'framework':<13}{'row':<26}" + (f"{'tree':<20}{'nodes':>6}  " if trees else "") +
          f"{'tok/s':>8}{'x base':>8}{'x hf':>7}{'alpha':>7}"
          f"{'tok/pass':>9}{'(cf)':>7}{'ideal x':>9}{'frac':>7}  same")
  lines = [head, "-" * len(head)]
  for r in result["rows"]:
    lines.append(
        f"{r['framework']:<13}{name(r)[:25]:<26}{tcol(r)}{_f(r['tokens_per_s'], '{:.1f}'):>8}"
        f"{_f(r['speedup']):>8}{_f(r['vs_hf_greedy']):>7}{_f(r['acceptance_rate']):>7}"
        f"{_f(r['tokens_per_pass']):>9}{_f(r['closed_form_tokens_per_pass']):>7}"
        f"{_f(r['ideal_speedup']):>9}{_f(r['fraction_of_ideal']):>7}  "
        f"{'yes' if r['identical_to_base'] else 'NO'}")
  cats = list(dict.fromkeys(p["category"] for p in result["prompts"]))
  lines += ["", "speedup over the same framework's target alone, by prompt category "
            "(alpha in brackets):", f"{'':<13}{'':<26}" + "".join(f"{c[:15]:>16}" for c in cats)]
  for r in result["rows"]:
    cells = []
    for c in cats:
      x = r["by_category"].get(c, {})
      a = x.get("acceptance_rate")
      cells.append(f"{_f(x.get('speedup'))} ({_f(a)})" if a is not None else _f(x.get("speedup")))
    lines.append(f"{r['framework']:<13}{r['row'][:25]:<26}" + "".join(f"{c:>16}" for c in cells))
  c = result["costs"].get("specjax") or {}
  if c:
    lines.append("")
    lines.append(f"specjax per-pass costs (ms, context {result['costs']['context_len']}): "
                 f"step {1e3 * c['c_step']:.2f}, verify(k+1) {1e3 * c['c_verify']:.2f}, " +
                 ", ".join(f"draft[{n}] {1e3 * v:.2f}" for n, v in c["c_draft"].items()))
    if c.get("c_verify_tree"):
      lines.append("  trees (ms): " + ", ".join(
          [f"verify[{t}] {1e3 * v:.2f}" for t, v in c["c_verify_tree"].items()] +
          [f"draft[{n}] {1e3 * v:.2f}" for n, v in c["c_draft_tree"].items()]))
  for s in result["skipped"]:
    lines.append(f"skipped {s['row']}: {s['note']}")
  return "\n".join(lines)
