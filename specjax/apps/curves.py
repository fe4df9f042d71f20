"""Acceptance curves: sweep drafters x temperatures x k (x token trees) over a prompt set.

Per setting the sweep records (see `RECORD_FIELDS`) acceptance per draft position,
alpha, tokens per target pass beside the closed form (1 - alpha^(k+1)) / (1 - alpha),
and the speedup over the target alone measured in the same run, at the same
temperature, on the same prompts and batches. Prompts are decoded in batches of
`batch_size` rows (0: all), of one category each when `batch_by_category`; acceptance
figures always exist per category (from per-row counters), speed figures per category
only when the calls were split by category.

With `config.trees` (token trees separated by ";", see `common.parse_trees`) every
drafter that drafts trees runs with the chain and with each tree at the k it fits; the
records then carry `tree` ("chain" or the tree's spec) and the fields of `TREE_FIELDS`,
the plots draw one line per (drafter, tree), and tokens_per_pass_vs_nodes.png plots
tokens per pass against the nodes verified per round. Without trees the outputs are
as they were.

Outputs in the workdir: curves.jsonl (one record per setting), tb/ (TensorBoard
scalars, x axis = k), tokens_per_pass_vs_k.png, per_position_acceptance.png,
speedup_vs_k.png, acceptance_by_category.png, summary.md.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

from specjax import prompts as prompts_lib
from specjax.apps import common
from specjax.decoding.stats import expected_tokens_per_pass

RECORD_FIELDS = {
    "drafter": "drafter spec or model source; 'none' for the target alone",
    "k": "tokens drafted per round (0 for the target alone)",
    "temperature": "sampling temperature of target and draft (0 = greedy)",
    "acceptance_rate": "alpha = accepted / checked draft positions",
    "per_position_acceptance": "P(draft position i accepted | position i reached), i = 0..k-1",
    "tokens_per_pass": "(accepted + verify passes) / verify passes",
    "closed_form_tokens_per_pass": "(1 - alpha^(k+1)) / (1 - alpha), alpha as measured",
    "tokens_per_s": "new tokens / decode seconds (compile excluded), summed over batches",
    "target_tokens_per_s": "the same for the target alone at this temperature",
    "speedup": "tokens_per_s / target_tokens_per_s",
    "new_tokens, target_passes, draft_passes, verify_passes, wall_time_s": "run totals",
    "per_category": "the same fields per prompt category",
}
TREE_FIELDS = {  # with config.trees only
    "tree": "'chain', or the token tree's spec ('static:4,2,1,1', 'dynamic:16'); None for "
            "the target alone",
    "tree_shape": "the tree as generate built it (None for a chain)",
    "nodes_per_round": "draft nodes the target verifies per round (k for a chain)",
    "path_lengths": "[k+1]: verify passes that accepted n drafts (the accepted path's length)",
    "mean_accepted_path": "accepted drafts per verify pass: sum_n n * path_lengths[n] / passes",
    "per_depth_acceptance": "P(a node of depth i+1 accepted | depth i reached), i = 0..k-1 "
                            "(= per_position_acceptance)",
    "per_rank_acceptance": "[k][R]: P(the r-th child accepted | reached and ranks < r "
                           "rejected); one rank for a chain",
}


def fields(config) -> dict:
  """The documented record fields of a sweep with this config."""
  return {**RECORD_FIELDS, **TREE_FIELDS} if config.get("trees", "") else dict(RECORD_FIELDS)


def _batches(rows: list, batch_size: int, by_category: bool) -> list[list[int]]:
  """Row indices in generate calls of at most batch_size rows (0: as many as possible),
  each call holding one category when by_category (so each category has its own time)."""
  groups: dict = {}
  for i, r in enumerate(rows):
    groups.setdefault(r["category"] if by_category else "", []).append(i)
  out = []
  for idx in groups.values():
    step = batch_size or len(idx)
    out += [idx[j:j + step] for j in range(0, len(idx), step)]
  return out


def _summary(stats, k: int, with_tree: bool = False) -> dict:
  d = stats.to_dict()
  keep = ("new_tokens", "target_passes", "draft_passes", "verify_passes", "acceptance_rate",
          "per_position_acceptance", "tokens_per_pass", "closed_form_tokens_per_pass",
          "tokens_per_s", "wall_time_s")
  out = {key: d[key] for key in keep}
  if k == 0:
    out["closed_form_tokens_per_pass"] = None
  if with_tree and k:
    out.update(common.tree_fields(stats))
  return out


def sweep(config, workdir: str, progress: bool = True) -> list[dict]:
  """Runs the sweep, writes curves.jsonl and TensorBoard scalars, returns the records."""
  import specjax
  from specjax.apps.timing import best_of
  from specjax.loading import load_model
  from tensorboardX import SummaryWriter
  from tqdm import tqdm

  target = load_model(config.target)
  rows = prompts_lib.select(config.prompts.source, config.prompts.per_category,
                            prompts_lib.parse_list(config.prompts.categories),
                            prompts_lib.parse_list(config.prompts.get("ids", "")))
  ids = [target.encode(r["text"], chat=config.prompts.chat) for r in rows]
  batches = _batches(rows, int(config.batch_size), bool(config.batch_by_category))
  order = [i for b in batches for i in b]  # row order of the merged stats
  drafts, skipped = common.load_drafts(prompts_lib.parse_list(config.drafters), config.allow_hub,
                                        target)
  ks = [int(x) for x in prompts_lib.parse_list(config.ks)]
  temps = [float(x) for x in prompts_lib.parse_list(config.temperatures)]
  trees = common.parse_trees(config.get("trees", ""), ks)  # {spec: [k]}
  with_tree = bool(trees)
  tree_ok = {}  # (drafter label, tree) -> measured
  for label, d in drafts.items():
    for tree in trees:
      note = common.tree_note(d, target, label, tree)
      tree_ok[(label, tree)] = note is None
      if note:
        skipped.append({"row": f"{label} [{tree}]", "note": note})
  with open(os.path.join(workdir, "prompts.json"), "w") as f:
    json.dump({"prompts": rows, "skipped_drafters": skipped}, f, indent=2)

  # (temperature, drafter label, drafter, k, tree: None for the chain)
  settings = [(t, "none", None, 0, None) for t in temps]
  settings += [(t, label, d, k, tree) for t in temps for label, d in drafts.items() for k in ks
               for tree in [None] + [x for x, kx in trees.items()
                                     if k in kx and tree_ok[(label, x)]]]
  writer = SummaryWriter(os.path.join(workdir, "tb"))
  records, base = [], {}
  bar = tqdm(settings, desc="curves", disable=not progress)
  with open(os.path.join(workdir, "curves.jsonl"), "w") as out:
    for t, label, draft, k, tree in bar:
      bar.set_postfix_str(f"T={t} {label} k={k}" + (f" {tree}" if tree else ""))
      per_batch = []
      for b in batches:
        res = best_of(int(config.repeats), target, [ids[i] for i in b], int(config.max_new_tokens),
                      draft=draft, k=max(k, 1), temperature=t, top_k=int(config.top_k),
                      top_p=float(config.top_p), seed=int(config.seed), tree=tree)
        per_batch.append(res.stats)
      merged = common.merge_stats(per_batch)
      rec = {"drafter": label, "k": k, "temperature": t}
      if with_tree:
        rec["tree"] = None if label == "none" else (tree or "chain")
      rec.update(**_summary(merged, k, with_tree), per_category={})
      for cat in dict.fromkeys(r["category"] for r in rows):
        pos = [j for j, i in enumerate(order) if rows[i]["category"] == cat]
        own = [s for s, b in zip(per_batch, batches) if all(rows[i]["category"] == cat for i in b)]
        # A category's time is known when its rows were decoded in calls of their own.
        wall = sum(s.wall_time_s for s in own) if sum(len(s.new_tokens) for s in own) == len(
            pos) else 0.0
        rec["per_category"][cat] = _summary(common.select_rows(merged, pos, wall), k, with_tree)
      if label == "none":
        base[t] = rec
      tb = base[t]
      rec["target_tokens_per_s"] = tb["tokens_per_s"]
      rec["speedup"] = common.ratio(rec["tokens_per_s"], tb["tokens_per_s"])
      for cat, c in rec["per_category"].items():
        c["speedup"] = common.ratio(c["tokens_per_s"], tb["per_category"][cat]["tokens_per_s"])
      out.write(json.dumps(rec) + "\n")
      out.flush()
      records.append(rec)
      if label != "none":
        tag = f"{label}/T={t:g}" if tree is None else f"{label}/{tree}/T={t:g}"
        for key in ("acceptance_rate", "tokens_per_pass", "closed_form_tokens_per_pass",
                    "tokens_per_s", "speedup"):
          if rec[key] is not None:
            writer.add_scalar(f"{tag}/{key}", rec[key], k)
        for i, a in enumerate(rec["per_position_acceptance"]):
          if a is not None:
            writer.add_scalar(f"{tag}/per_position_acceptance/k={k}", a, i)
  writer.close()
  return records


def _lines(records) -> list:
  """(drafter, tree) of every curve: tree None in a sweep without trees, else "chain" or
  the tree's spec."""
  return list(dict.fromkeys((r["drafter"], r.get("tree")) for r in records
                            if r["drafter"] != "none"))


def _name(line) -> str:
  d, tree = line
  return d if tree is None else f"{d} {tree}"


def _is_chain(line) -> bool:
  return line[1] in (None, "chain")


def _temps(records):
  return list(dict.fromkeys(r["temperature"] for r in records))


def _of(records, line, t):
  return [r for r in records if (r["drafter"], r.get("tree")) == line and r["temperature"] == t]


def _series(records, line, t, key):
  pts = sorted((r["k"], r[key]) for r in _of(records, line, t) if r[key] is not None)
  return [p[0] for p in pts], [p[1] for p in pts]


def plot(records: list[dict], workdir: str) -> list[str]:
  """Writes the PNGs; returns their paths."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  temps, lines, paths = _temps(records), _lines(records), []
  colors = {d: f"C{i}" for i, d in enumerate(dict.fromkeys(d for d, _ in lines))}
  trees = list(dict.fromkeys(tree for _, tree in lines))
  marks = {tree: "osD^vP*X"[i % 8] for i, tree in enumerate(trees)}  # chain first: "o"
  ks_all = sorted({r["k"] for r in records if r["k"]}) or [1]

  def save(fig, name):
    path = os.path.join(workdir, name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)

  # 1. Tokens per pass vs k: measured (solid) and, for chains, the closed form from
  #    measured alpha (dashed), over grey iso-alpha closed-form curves.
  fig, axes = plt.subplots(1, len(temps), figsize=(5.5 * len(temps), 4.2), squeeze=False)
  grid = np.arange(1, max(ks_all) + 1)
  for ax, t in zip(axes[0], temps):
    for a in (0.2, 0.4, 0.6, 0.8, 0.9):
      ax.plot(grid, [expected_tokens_per_pass(a, int(k)) for k in grid], color="0.85", lw=1)
      ax.annotate(f"α={a}", (grid[-1], expected_tokens_per_pass(a, int(grid[-1]))), fontsize=7,
                  color="0.5")
    for line in lines:
      c = colors[line[0]]
      ks, ys = _series(records, line, t, "tokens_per_pass")
      ax.plot(ks, ys, marks[line[1]] + "-", color=c, label=f"{_name(line)} measured")
      if _is_chain(line):
        ks, ys = _series(records, line, t, "closed_form_tokens_per_pass")
        ax.plot(ks, ys, "x--", color=c, alpha=0.8, label=f"{_name(line)} closed form")
    ax.set(title=f"tokens per target pass, T={t:g}", xlabel="k (drafted tokens)",
           ylabel="tokens / pass")
    ax.legend(fontsize=7)
  save(fig, "tokens_per_pass_vs_k.png")

  # 2. Per-position (per-depth) acceptance at the largest k of each curve.
  fig, axes = plt.subplots(1, len(temps), figsize=(5.5 * len(temps), 4.2), squeeze=False)
  for ax, t in zip(axes[0], temps):
    for line in lines:
      recs = _of(records, line, t)
      for r in recs:
        ys = [np.nan if a is None else a for a in r["per_position_acceptance"]]
        big = r["k"] == max(x["k"] for x in recs)
        ax.plot(range(1, len(ys) + 1), ys, marks[line[1]] + "-" if big else ":",
                color=colors[line[0]], alpha=1.0 if big else 0.35,
                label=f"{_name(line)} (k={r['k']})" if big else None)
    ax.set(title=f"acceptance per draft position, T={t:g}", xlabel="draft position",
           ylabel="P(accepted | reached)", ylim=(-0.02, 1.02))
    ax.legend(fontsize=7)
  save(fig, "per_position_acceptance.png")

  # 3. Speedup over the target alone vs k.
  fig, axes = plt.subplots(1, len(temps), figsize=(5.5 * len(temps), 4.2), squeeze=False)
  for ax, t in zip(axes[0], temps):
    ax.axhline(1.0, color="0.5", lw=1)
    for line in lines:
      ks, ys = _series(records, line, t, "speedup")
      ax.plot(ks, ys, marks[line[1]] + "-", color=colors[line[0]], label=_name(line))
    ax.set(title=f"speedup over the target alone, T={t:g}", xlabel="k", ylabel="speedup")
    ax.legend(fontsize=7)
  save(fig, "speedup_vs_k.png")

  # 4. Alpha by prompt category (at each curve's largest k, first temperature).
  cats = list(dict.fromkeys(c for r in records for c in r["per_category"]))
  fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(cats) * max(1, len(lines)) ** 0.5), 4.2))
  width = 0.8 / max(1, len(lines))
  for j, line in enumerate(lines):
    r = max(_of(records, line, temps[0]), key=lambda x: x["k"])
    ys = [r["per_category"][c]["acceptance_rate"] or 0.0 for c in cats]
    ax.bar(np.arange(len(cats)) + j * width, ys, width, color=colors[line[0]],
           hatch=None if _is_chain(line) else "//", label=f"{_name(line)} (k={r['k']})")
  ax.set_xticks(np.arange(len(cats)) + 0.4 - width / 2, cats)
  ax.set(title=f"acceptance rate by prompt category, T={temps[0]:g}", ylabel="alpha", ylim=(0, 1))
  ax.legend(fontsize=7)
  save(fig, "acceptance_by_category.png")

  # 5. With trees: tokens per pass against the nodes verified per round (chain vs trees).
  if any(tree not in (None, "chain") for tree in trees):
    fig, axes = plt.subplots(1, len(temps), figsize=(5.5 * len(temps), 4.2), squeeze=False)
    for ax, t in zip(axes[0], temps):
      for line in lines:
        pts = sorted((r["nodes_per_round"], r["tokens_per_pass"]) for r in _of(records, line, t)
                     if r["tokens_per_pass"] is not None)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marks[line[1]] + ("-" if _is_chain(
            line) else ""), color=colors[line[0]], label=_name(line), ms=7)
      ax.set(title=f"tokens per target pass vs tree size, T={t:g}",
             xlabel="draft nodes verified per round (chain: k)", ylabel="tokens / pass")
      ax.set_xscale("log", base=2)
      ax.legend(fontsize=7)
    save(fig, "tokens_per_pass_vs_nodes.png")
  return paths


def _f(x: Optional[float], spec="{:.2f}") -> str:
  return "-" if x is None else spec.format(x)


def summary_markdown(records: list[dict]) -> str:
  """Markdown tables: every setting, then per category (largest k per drafter); with
  trees a tree column, nodes per round, the accepted path and per-depth acceptance."""
  if any("tree" in r for r in records):
    return _summary_trees(records)
  lines = ["| drafter | T | k | alpha | tokens/pass | closed form | tok/s | speedup |",
           "|---|---|---|---|---|---|---|---|"]
  for r in records:
    lines.append(f"| {r['drafter']} | {r['temperature']:g} | {r['k']} | "
                 f"{_f(r['acceptance_rate'])} | {_f(r['tokens_per_pass'])} | "
                 f"{_f(r['closed_form_tokens_per_pass'])} | {_f(r['tokens_per_s'], '{:.1f}')} | "
                 f"{_f(r['speedup'])} |")
  lines += ["", "Per category (largest k of each drafter):", "",
            "| drafter | T | k | category | alpha | tokens/pass | speedup |", "|---|---|---|---|---|---|---|"]
  for t in _temps(records):
    for line in _lines(records):
      r = max(_of(records, line, t), key=lambda x: x["k"])
      for cat, c in r["per_category"].items():
        lines.append(f"| {line[0]} | {t:g} | {r['k']} | {cat} | {_f(c['acceptance_rate'])} | "
                     f"{_f(c['tokens_per_pass'])} | {_f(c.get('speedup'))} |")
  return "\n".join(lines)


def _summary_trees(records: list[dict]) -> str:
  tree = lambda r: r.get("tree") or "-"
  lines = ["| drafter | tree | T | k | nodes/round | alpha | tokens/pass | accepted path | "
           "closed form | tok/s | speedup |", "|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in records:
    lines.append(f"| {r['drafter']} | {tree(r)} | {r['temperature']:g} | {r['k']} | "
                 f"{r.get('nodes_per_round', 0)} | {_f(r['acceptance_rate'])} | "
                 f"{_f(r['tokens_per_pass'])} | {_f(r.get('mean_accepted_path'))} | "
                 f"{_f(r['closed_form_tokens_per_pass'])} | {_f(r['tokens_per_s'], '{:.1f}')} | "
                 f"{_f(r['speedup'])} |")
  depth = max([r["k"] for r in records] + [1])
  lines += ["", "Acceptance per depth (P(depth i accepted | reached)):", "",
            "| drafter | tree | T | k | " + " | ".join(f"d{i}" for i in range(1, depth + 1)) + " |",
            "|---|---|---|---|" + "---|" * depth]
  for r in records:
    if r["drafter"] != "none":
      acc = list(r["per_position_acceptance"]) + [None] * (depth - r["k"])
      lines.append(f"| {r['drafter']} | {tree(r)} | {r['temperature']:g} | {r['k']} | " +
                   " | ".join(_f(a) for a in acc) + " |")
  lines += ["", "Per category (largest k of each drafter and tree):", "",
            "| drafter | tree | T | k | category | alpha | tokens/pass | speedup |",
            "|---|---|---|---|---|---|---|---|"]
  for t in _temps(records):
    for line in _lines(records):
      r = max(_of(records, line, t), key=lambda x: x["k"])
      for cat, c in r["per_category"].items():
        lines.append(f"| {line[0]} | {line[1]} | {t:g} | {r['k']} | {cat} | "
                     f"{_f(c['acceptance_rate'])} | {_f(c['tokens_per_pass'])} | "
                     f"{_f(c.get('speedup'))} |")
  return "\n".join(lines)
