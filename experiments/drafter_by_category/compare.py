"""Every drafter per prompt category: tokens per target pass, alpha, pass costs, speedup.

    nice -n 10 python experiments/drafter_by_category/compare.py \
        --config=experiments/drafter_by_category/compare_config.py \
        --out=experiments/drafter_by_category/compare

Each held-out prompt (one per category, chosen inside one prompt-length bucket so each
setting compiles once) is decoded alone (batch 1, greedy) by the target and then by
every setting, one category after the other, so each speedup is a ratio of two runs made
side by side in this process. Pass costs: c(T) / c(1), one target pass over T tokens
(the setting's verify width: k + 1 for a chain, N + 1 for a tree, 1 + (G + W)(N - 1)
for lookahead) against a 1-token step, and one `propose` of a chain's k drafts, timed on a
cache holding one prompt, before and after each prompt's runs (the mean of the two: this
machine drifts within minutes); and the measured time of a whole round / c(1) (the run's
time after its prefill over its rounds), and what is left of it beyond the pass and the
proposal. The closed form tokens_per_pass x c(1) / (c(T) + propose) models the rounds, so it
is compared with the rounds' speedup (prefill apart: `SpecStats.prefill_time_s`); the
end-to-end speedup, which counts the prompt's pass and the drafter's set-up as well, is
reported beside it. Writes results.jsonl (one
record per setting and category), meta.json (skipped settings), table.md and
by_category.png into --out; --append adds settings to an earlier run's records (e.g.
drafters trained later), each still measured against the target alone of its own run.
"""
import json
import os
import sys
import time

from absl import app, flags
from ml_collections import config_flags

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Comparison config.", lock_config=True)
flags.DEFINE_string("out", None, "Output folder.")
flags.DEFINE_bool("append", False, "Keep the records of settings this run does not redo "
                  "(each record's speedup is against the target alone of its own run).")
flags.DEFINE_bool("report_only", False, "Only rewrite table.md and by_category.png from "
                  "--out/results.jsonl (e.g. of a run stopped part way).")
flags.mark_flags_as_required(["config", "out"])


def parse_settings(text: str) -> list:
  """'label=draft|k|tree;...' -> [(label, draft or None, k, tree or None)]."""
  out = []
  for item in filter(None, (s.strip() for s in text.split(";"))):
    label, _, rest = item.partition("=")
    draft, k, tree = (rest.split("|") + ["", ""])[:3]
    out.append((label, None if draft == "none" else draft, int(k or 0), tree or None))
  return out


def pick_prompts(target, rows, per_category: int, max_len: int) -> list:
  """Per category the first prompts whose chat-encoded length lies in (max_len / 2, max_len]
  (one bucket), else the shortest ones."""
  out, cats = [], list(dict.fromkeys(r["category"] for r in rows))
  for cat in cats:
    enc = [(r, target.encode(r["text"], chat=True)) for r in rows if r["category"] == cat]
    good = [x for x in enc if max_len // 2 < len(x[1]) <= max_len]
    out += (good or sorted(enc, key=lambda x: len(x[1])))[:per_category]
  return out


def pass_width(drafter, k: int, tree) -> int:
  if hasattr(drafter, "round_slots"):
    return drafter.round_slots
  return k + 1 if tree is None else tree.slots


class CostTimer:
  """The costs the closed form needs, timed again beside every prompt's runs so that the
  machine's drift (up to 3x between hours here, and within minutes) hits the runs and
  their costs alike: one target pass over each width T, and one `propose` of k drafts of
  every chain setting (None where a drafter has no propose, as lookahead), all compiled
  once on a cache holding `context_len` random tokens."""

  def __init__(self, target, widths, drafts: dict, context_len: int, max_len: int):
    import numpy as np
    from specjax.tune import costs
    self._time = costs.time_call
    max_len = -(-max_len // 128) * 128
    self.passes = costs.pass_calls(target, context_len, max_len, widths)
    context = np.random.default_rng(0).integers(
        0, target.cfg.vocab_size, size=context_len).astype(np.int32)
    self.proposes = {}
    for label, (drafter, k) in drafts.items():
      try:
        self.proposes[label] = costs.draft_call(target, drafter, k, context, max_len)
      except Exception:  # noqa: BLE001 - drafters that own their pass have no propose
        self.proposes[label] = None

  def measure(self, n: int = 3, repeats: int = 2) -> dict:
    """{"pass": {T: s}, "propose": {label: s or None}}; compiles on the first call."""
    return {"pass": {t: self._time(*c, n, repeats) for t, c in self.passes.items()},
            "propose": {l: None if c is None else self._time(*c, n, repeats)
                        for l, c in self.proposes.items()}}


def mean_costs(a: dict, b: dict) -> dict:
  """The mean of two `CostTimer.measure` results (before and after a prompt's runs)."""
  avg = lambda x, y: None if x is None or y is None else (x + y) / 2
  return {"pass": {t: avg(v, b["pass"][t]) for t, v in a["pass"].items()},
          "propose": {l: avg(v, b["propose"][l]) for l, v in a["propose"].items()}}


def closed_form(tokens_per_pass, pass_cost, draft_cost):
  """The speedup a chain round should give: tokens_per_pass x c(1) / (c(k+1) + k c_draft),
  costs in units of c(1), with k c_draft the measured cost of one propose of k drafts (a
  feature draft's propose is a catch-up pass plus k - 1 steps, not k equal steps)."""
  if draft_cost is None:
    return None
  return tokens_per_pass / (pass_cost + draft_cost)


def main(argv):
  del argv
  sys.path.insert(0, os.getcwd())
  import numpy as np
  import specjax
  from specjax import prompts as prompts_lib
  from specjax.decoding import tree as tree_lib
  from specjax.api import resolve_drafter
  c, out_dir = FLAGS.config, FLAGS.out
  os.makedirs(out_dir, exist_ok=True)
  if FLAGS.report_only:
    with open(os.path.join(out_dir, "results.jsonl")) as f:
      records = [json.loads(line) for line in f if line.strip()]
    write_table(records, out_dir)
    plot(records, out_dir)
    return
  target = specjax.load_model(c.target)
  rows = pick_prompts(target, prompts_lib.select(c.prompts_source, 0, prompts_lib.parse_list(c.categories)), c.per_category, c.max_prompt_len)
  settings, drafters, skipped = [], {}, []
  for label, draft, k, tree in parse_settings(c.settings.replace("{medusa}", c.medusa)):
    try:
      d = resolve_drafter(draft, target)
      kk = int(getattr(d, "fixed_k", k)) if draft else 0
      spec = tree_lib.resolve_tree(tree, kk, draft is not None)
    except Exception as e:  # noqa: BLE001 - a drafter that is not available skips its rows
      skipped.append({"setting": label, "note": f"{type(e).__name__}: {e}"})
      continue
    drafters[label] = d
    settings.append((label, draft, kk, spec))
  widths = [1] + [pass_width(drafters[l], k, t) for l, d, k, t in settings if d]
  longest = max(len(ids) for _, ids in rows)
  timer = CostTimer(target, widths, {l: (drafters[l], k) for l, d, k, t in settings
                                     if d and t is None},
                    longest, 2 * longest + c.max_new_tokens + max(widths))
  timer.measure()  # compile
  path = os.path.join(out_dir, "results.jsonl")
  records = []
  if FLAGS.append and os.path.exists(path):
    redo = {label for label, *_ in settings}
    with open(path) as f:
      records = [r for r in map(json.loads, f) if r["setting"] not in redo]
  with open(path, "w") as f:
    for r in records:
      f.write(json.dumps(r) + "\n")
    for row, ids in rows:
      base, before = None, timer.measure()
      runs = []
      for label, draft, k, spec in settings:
        res = specjax.generate(target, [ids], c.max_new_tokens, draft=drafters[label] if draft else None,
                               k=max(k, 1), tree=spec)
        runs.append((label, draft, k, spec, res))
      cost = mean_costs(before, timer.measure())  # timed around this prompt's runs
      c1 = cost["pass"][1]
      for label, draft, k, spec, res in runs:
        st = res.stats
        if draft is None:
          base = res
        width = pass_width(drafters[label], k, spec) if draft else 1
        rounds = int(st.rounds.sum())
        propose = cost["propose"].get(label)
        draft_cost = None if propose is None else propose / c1
        rec = {"setting": label, "drafter": draft or "none", "k": k,
               "tree": None if spec is None else str(spec), "category": row["category"],
               "id": row["id"], "prompt_tokens": len(ids), "new_tokens": int(st.new_tokens.sum()),
               "alpha": None if draft is None else st.acceptance_rate,
               "tokens_per_pass": st.tokens_per_pass, "pass_tokens": width,
               "c1_s": c1, "pass_cost": cost["pass"][width] / c1,
               "draft_cost": draft_cost,
               "round_cost": (decode_s(st) / max(rounds, 1)) / c1,
               "wall_s": st.wall_time_s, "prefill_s": st.prefill_time_s,
               "speedup": base.stats.wall_time_s / st.wall_time_s,
               "decode_speedup": decode_s(base.stats) / decode_s(st),
               "closed_form": closed_form(st.tokens_per_pass, cost["pass"][width] / c1,
                                          draft_cost) if draft else None,
               "identical": res.tokens == base.tokens}
        records.append(rec)
        f.write(json.dumps(rec) + "\n")
        f.flush()
        print(f"{time.strftime('%H:%M:%S')} {row['category']:<11} {label:<22} "
              f"tokens/pass {rec['tokens_per_pass']:.2f} speedup {rec['speedup']:.2f}", flush=True)
  meta_path = os.path.join(out_dir, "meta.json")
  meta = {"runs": []}
  if FLAGS.append and os.path.exists(meta_path):
    with open(meta_path) as f:
      meta = json.load(f)
  meta["runs"].append({"config": json.loads(c.to_json()), "skipped": skipped,
                       "prompts": [r["id"] for r, _ in rows], "finished": time.strftime("%H:%M:%S")})
  with open(meta_path, "w") as f:
    json.dump(meta, f, indent=2)
  write_table(records, out_dir)
  plot(records, out_dir)


def decode_s(stats) -> float:
  """A run's time after its prefill: the rounds, which the closed form models."""
  return stats.wall_time_s - stats.prefill_time_s


def _ratio(r):
  """Measured speedup / closed form: of the rounds (prefill apart) where recorded."""
  if not r.get("closed_form"):
    return None
  return r.get("decode_speedup", r["speedup"]) / r["closed_form"]


def _mean(xs):
  xs = [x for x in xs if x is not None and x == x]
  return sum(xs) / len(xs) if xs else None


def _f(x, spec="{:.2f}"):
  return "-" if x is None else spec.format(x)


def write_table(records, out_dir):
  labels = list(dict.fromkeys(r["setting"] for r in records))
  cats = list(dict.fromkeys(r["category"] for r in records))
  lines = ["| setting | k | tree | pass T | c(T)/c(1) | draft/c(1) | round/c(1) | rest/c(1) | "
           "alpha | tokens/pass | speedup | rounds' speedup | closed form | "
           "rounds' speedup / closed form |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for l in labels:
    rs = [r for r in records if r["setting"] == l]
    r0 = rs[0]
    tree = (r0["tree"] or "-").replace("static tree of ", "").split(", topk")[0]
    pass_cost = _mean([r["pass_cost"] for r in rs])
    draft = _mean([r.get("draft_cost") for r in rs])
    round_cost = _mean([r["round_cost"] for r in rs])
    rest = None if draft is None and r0["k"] else round_cost - pass_cost - (draft or 0.0)
    lines.append(f"| {l} | {r0['k']} | {tree} | {r0['pass_tokens']} | "
                 f"{_f(pass_cost)} | {_f(draft)} | {_f(round_cost)} | "
                 f"{_f(rest)} | "
                 f"{_f(_mean([r['alpha'] for r in rs]))} | "
                 f"{_f(_mean([r['tokens_per_pass'] for r in rs]))} | "
                 f"{_f(_mean([r['speedup'] for r in rs]))} | "
                 f"{_f(_mean([r.get('decode_speedup') for r in rs]))} | "
                 f"{_f(_mean([r.get('closed_form') for r in rs]))} | "
                 f"{_f(_mean([_ratio(r) for r in rs]))} |")
  n_prompts = {c: len({r["id"] for r in records if r["category"] == c}) for c in cats}
  lines += ["", "Tokens per target pass (speedup, and for chains the rounds' speedup / closed "
            "form) by "
            "category, the mean over its prompts ("
            + ", ".join(f"{c} {n}" for c, n in n_prompts.items()) + "):", "",
            "| setting | " + " | ".join(cats) + " |", "|---" * (len(cats) + 1) + "|"]
  for l in labels:
    cells = []
    for cat in cats:
      rs = [r for r in records if r["setting"] == l and r["category"] == cat]
      ratio = _mean([_ratio(r) for r in rs])
      cells.append("-" if not rs else f"{_mean([r['tokens_per_pass'] for r in rs]):.2f} "
                   f"({_mean([r['speedup'] for r in rs]):.2f}x"
                   + ("" if ratio is None else f", {ratio:.2f} of closed form") + ")")
    lines.append(f"| {l} | " + " | ".join(cells) + " |")
  ok = all(r["identical"] for r in records)
  lines += ["", f"Greedy output identical to the target alone in every run: {ok}."]
  with open(os.path.join(out_dir, "table.md"), "w") as f:
    f.write("\n".join(lines) + "\n")


def plot(records, out_dir):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import numpy as np
  labels = [l for l in dict.fromkeys(r["setting"] for r in records) if l != "target"]
  cats = list(dict.fromkeys(r["category"] for r in records))
  fig, axes = plt.subplots(2, 1, figsize=(max(8, 1.6 * len(cats)), 7.5), sharex=True)
  width = 0.85 / max(1, len(labels))
  for j, l in enumerate(labels):
    for ax, key in zip(axes, ("tokens_per_pass", "speedup")):
      ys = [_mean([r[key] for r in records if r["setting"] == l and r["category"] == c]) or 0.0
            for c in cats]
      ax.bar(np.arange(len(cats)) + j * width, ys, width, color=f"C{j % 10}",
             hatch="//" if "tree" in l else None, label=l)
  axes[0].set(ylabel="tokens per target pass", title="drafters by prompt category (greedy, batch 1)")
  axes[1].axhline(1.0, color="0.4", lw=1)
  axes[1].set(ylabel="measured speedup vs target alone")
  axes[1].set_xticks(np.arange(len(cats)) + 0.425 - width / 2, cats)
  axes[0].legend(fontsize=7, ncol=3)
  fig.tight_layout()
  fig.savefig(os.path.join(out_dir, "by_category.png"), dpi=110)


if __name__ == "__main__":
  app.run(main)
