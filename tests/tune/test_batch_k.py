"""k="auto" sized by the batch (`specjax.tune.k`, `loop_costs`, `acceptance`, `store`):
the predicted-speedup arithmetic, the choice of the target alone when no k pays (stub cost
tables), the rounds a batch needs (simulation against exact enumeration, and the slowest
row setting the batch), and the cost store keyed by machine, model and batch bucket and
read back by a second call that measures nothing. Stub runs, no timing."""
from __future__ import annotations

import itertools
import types

import numpy as np
import pytest

import specjax
from specjax.tune import acceptance, loop_costs, store
from specjax.tune import k as auto_k
from tiny_models import perturbed, random_prompts, tiny


def _table(alone_round, spec_rounds, prefill=0.0):
  """A stub `loop_costs.measure` table: {"0": alone, "k": spec}."""
  return {"0": {"round_s": alone_round, "prefill_s": prefill},
          **{str(k): {"round_s": r, "prefill_s": prefill} for k, r in spec_rounds.items()}}


def test_predicted_speedup_arithmetic():
  alone = {"round_s": 0.02, "prefill_s": 0.5}
  spec = {"round_s": 0.05, "prefill_s": 0.6}
  # (0.5 + 31 * 0.02) / (0.6 + 12 * 0.05) = 1.12 / 1.2
  assert auto_k.predicted_speedup(alone, spec, 12, 32) == pytest.approx(1.12 / 1.2)
  assert auto_k.predicted_speedup(alone, alone, 31, 32) == pytest.approx(1.0)


def test_target_alone_when_no_k_pays():
  rounds = {1: 20.0, 2: 16.0, 3: 14.0, 4: 13.0}  # iterations for 32 tokens
  # at batch 32 a round costs ~k + 1 steps: no k pays
  dear = auto_k.choose(_table(1.0, {k: k + 1.0 for k in rounds}), rounds, 32, batch=32)
  assert dear["k"] == 0 and dear["predicted"] == 1.0
  best = max(dear["predicted_speedup"].values())
  assert best < auto_k.MIN_GAIN and dear["best_k"] == 1
  assert dear["note"] == f"target alone: no k pays at batch 32 (predicted {best:.2f} at best, k=1)"
  # control: rounds that cost 1.2 steps each pay from k = 1, most at k = 4 (31 / (13 * 1.2))
  cheap = auto_k.choose(_table(1.0, {k: 1.2 for k in rounds}), rounds, 32, batch=1)
  assert cheap["k"] == 4 and cheap["predicted"] == pytest.approx(31 / (13 * 1.2))
  assert cheap["note"].startswith("k=4 at batch 1 (predicted 1.99x")
  # just under the margin: still the target alone
  edge = {k: 31 / (r * (auto_k.MIN_GAIN - 0.01)) for k, r in rounds.items()}
  assert auto_k.choose(_table(1.0, edge), rounds, 32, batch=4)["k"] == 0


def _exact_rounds(a, need, k):
  """E[rounds] of one row by enumerating the rounds' outcomes (each round keeps 1 + the
  run of leading accepted drafts; P(j accepted) = a^j (1 - a), or a^k for j = k)."""
  probs = [a ** j * (1 - a) for j in range(k)] + [a ** k]
  total = 0.0
  for n_rounds in range(1, need + 1):
    for outcome in itertools.product(range(k + 1), repeat=n_rounds):
      tokens = np.cumsum([j + 1 for j in outcome])
      if tokens[-1] >= need and (n_rounds == 1 or tokens[-2] < need):
        total += n_rounds * np.prod([probs[j] for j in outcome])
  return total


@pytest.mark.parametrize("a,k", [(0.3, 1), (0.6, 2), (0.8, 3)])
def test_expected_rounds_matches_enumeration(a, k):
  need = 5  # new_tokens - 1
  rates = np.full((1, k), a)
  sim = acceptance.expected_rounds(rates, k, batch=1, new_tokens=need + 1, sims=20000)
  assert sim == pytest.approx(_exact_rounds(a, need, k), rel=0.03)
  assert acceptance.expected_rounds(np.ones((1, k)), k, 1, 33) == -(-32 // (k + 1))
  assert acceptance.expected_rounds(np.zeros((1, k)), k, 1, 33) == 32


def test_the_slowest_row_sets_a_batch():
  """Half the rows accept everything, half nothing: a batch of 16 nearly always holds a
  slow row, so it needs the slow row's 31 rounds, not the mean of the two kinds."""
  rates = np.array([[1.0] * 4, [0.0] * 4])
  one = acceptance.expected_rounds(rates, 4, 1, 32)
  many = acceptance.expected_rounds(rates, 4, 16, 32)
  assert one == pytest.approx((31 + 7) / 2, rel=0.1) and many == pytest.approx(31, rel=0.01)


def test_merged_counts_pad_a_smaller_k_and_keep_the_newest():
  old = {"checked": [[4, 2, 1]], "accepted": [[2, 1, 0]]}
  new = {"checked": [[3]], "accepted": [[1]]}
  m = acceptance.merged(old, new)
  assert m == {"checked": [[4, 2, 1], [3, 0, 0]], "accepted": [[2, 1, 0], [1, 0, 0]]}
  assert acceptance.merged(old, new, max_rows=1)["checked"] == [[3, 0, 0]]
  # all positions: 4 of 10 accepted; position 2 pooled: (1 + 10 * 0.4) / (2 + 10), position
  # 3: (0 + 4) / (1 + 10); an unreached position of a row takes its position's rate
  rates = acceptance.row_rates(m, prior=2.0, position_prior=10.0)
  assert rates[1, 1] == pytest.approx(5 / 12) and rates[1, 2] == pytest.approx(4 / 11)
  assert rates[0, 0] == pytest.approx((2 + 2 * 7 / 17) / (4 + 2))


def _stub_world(batch_rounds):
  """A stub target and drafter, and run(prompts, n, k) returning stub stats whose loop
  takes 1 ms per iteration alone and 1.5 ms at any k, logging each call."""
  target = types.SimpleNamespace(name="stub", cfg="stub-cfg",
                                 params={"embed": np.zeros((4, 2), np.float32)})
  drafter = types.SimpleNamespace(name="stub-draft")
  calls = []

  def run(prompts, n, k):
    calls.append((len(prompts), n, k))
    b = len(prompts)
    iters = n - 1 if k == 0 else batch_rounds
    return types.SimpleNamespace(
        rounds=np.full(b, iters), prefill_time_s=0.01,
        wall_time_s=0.01 + iters * (1e-3 if k == 0 else 1.5e-3),
        checked=np.full((b, 4), 10), accepted=np.full((b, 4), 8))
  return target, drafter, run, calls


def test_store_keyed_by_machine_model_and_batch_bucket(tmp_path, monkeypatch):
  monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path))
  target, drafter, run, calls = _stub_world(batch_rounds=8)
  sampling = specjax.sampling.SamplingParams()
  choose = lambda b, model=target: auto_k.choose_k(model, drafter, [[1, 2, 3]] * b, 32,
                                                    sampling, run, log=False)
  first = choose(4)
  ks = loop_costs.K_PROBES
  # measured once: the acceptance run at max(ks), each program warmed for 2 tokens, then
  # REPEATS round-robins over the target alone and the ks
  probes = [(k, 2) for k in (0, *ks)] + [(k, loop_costs.COST_TOKENS) for k in (0, *ks)] * loop_costs.REPEATS
  assert calls[0] == (4, auto_k.CALIBRATION_TOKENS, max(ks))
  assert [c[2:0:-1] for c in calls[1:]] == probes
  assert first["calibration_s"] > 0 and first["costs"]["0"]["round_s"] == pytest.approx(1e-3)
  assert first["costs"]["2"]["round_s"] == pytest.approx(1.5e-3)
  n = len(calls)
  again = choose(3)  # batch 3: the same bucket as 4 -> nothing measured
  assert len(calls) == n and again["calibration_s"] == 0.0
  assert again["costs"] == first["costs"] and again["k"] == first["k"] > 0
  choose(5)  # bucket 8: the loop's costs are measured there, and 5 rows > 4 stored:
  # the acceptance of these rows joins the store first
  assert calls[n] == (5, auto_k.CALIBRATION_TOKENS, max(ks))
  assert [c[2:0:-1] for c in calls[n + 1:]] == probes
  n = len(calls)
  other = types.SimpleNamespace(**{**vars(target), "name": "other-model"})
  choose(4, other)  # another model: measured again, acceptance included
  assert calls[n][2] == max(ks) and len(calls) > n + 1
  n = len(calls)
  store.machine.cache_clear()
  monkeypatch.setattr(store.platform, "node", lambda: "another-host")
  choose(4)  # another machine: measured again
  assert len(calls) > n
  store.machine.cache_clear()


def test_acceptance_measured_on_calls_until_enough_rows(tmp_path, monkeypatch):
  """At batch 1 each call measures the drafter's acceptance on its own prompt until the
  store holds `MIN_CALIBRATION_ROWS` rows, then no more; the loop's costs are measured
  once. A stored one-row acceptance stood for every later prompt before."""
  monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path))
  target, drafter, run, calls = _stub_world(batch_rounds=8)
  sampling = specjax.sampling.SamplingParams()
  acceptance_runs = lambda: sum(c[1:] == (auto_k.CALIBRATION_TOKENS, max(loop_costs.K_PROBES))
                                for c in calls)
  spent = []
  for i in range(auto_k.MIN_CALIBRATION_ROWS + 2):
    choice = auto_k.choose_k(target, drafter, [[1, 2, 3 + i]], 32, sampling, run, log=False)
    spent.append(choice["calibration_s"] > 0)
    counts = store.get("acceptance", choice["acceptance_key"])
    assert len(counts["checked"]) == min(i + 1, auto_k.MIN_CALIBRATION_ROWS)
  assert acceptance_runs() == auto_k.MIN_CALIBRATION_ROWS
  assert spent == [True] * auto_k.MIN_CALIBRATION_ROWS + [False, False]
  timed_alone = [c for c in calls if c == (1, loop_costs.COST_TOKENS, 0)]
  assert len(timed_alone) == loop_costs.REPEATS  # the loop's costs: measured by the first call only
  # a larger batch than the store's rows: its own rows are measured once, then read
  rows = auto_k.MIN_CALIBRATION_ROWS
  for _ in range(2):
    choice = auto_k.choose_k(target, drafter, [[1, 2, 3]] * 6, 32, sampling, run, log=False)
    assert len(store.get("acceptance", choice["acceptance_key"])["checked"]) == rows + 6
  assert acceptance_runs() == auto_k.MIN_CALIBRATION_ROWS + 1
  assert auto_k.calibration_rows(10_000) == acceptance.MAX_ROWS


def test_k_auto_reuses_stored_costs_and_runs_the_target_alone_where_no_k_pays(
    tmp_path, monkeypatch, capfd):
  """A tiny target and a perturbed copy as draft (partial acceptance): the first call
  measures, the second reads the store; where no k pays (MIN_GAIN raised) the call is the
  target alone and says so, and where one does (MIN_GAIN 0) it yields that k's tokens."""
  monkeypatch.setenv("SPECJAX_CACHE", str(tmp_path))
  monkeypatch.setattr(loop_costs, "K_PROBES", (2,))  # two programs: alone and k = 2
  monkeypatch.setattr(loop_costs, "REPEATS", 1)
  monkeypatch.setattr(auto_k, "MIN_CALIBRATION_ROWS", 2)  # the first call's rows suffice
  target = tiny("llama", seed=0)
  draft = perturbed(target, 0.1)
  prompts = random_prompts(2, target.cfg.vocab_size, seed=6)
  monkeypatch.setattr(auto_k, "MIN_GAIN", 1e9)
  alone = specjax.generate(target, prompts, 12, draft=draft, k="auto")
  assert alone.k_choice["k"] == 0 and alone.stats.k == 0 and alone.k_choice["calibration_s"] > 0
  err = capfd.readouterr().err
  assert "target alone: no k pays at batch 2 (predicted" in err and "measured now" in err
  assert alone.tokens == specjax.generate(target, prompts, 12).tokens
  monkeypatch.setattr(auto_k, "MIN_GAIN", 0.0)
  spec = specjax.generate(target, prompts, 12, draft=draft, k="auto")
  assert spec.k_choice["calibration_s"] == 0.0 and "from the cost store" in capfd.readouterr().err
  k = spec.k_choice["k"]
  assert k == 2 and spec.stats.k == k and spec.tokens == alone.tokens
  acc = spec.stats.acceptance_rate
  assert 0.05 < acc < 0.95, acc  # partial acceptance: both outcomes of verification occur
  assert spec.tokens == specjax.generate(target, prompts, 12, draft=draft, k=k).tokens


def test_card_says_target_alone_and_prints_the_prediction_beside_the_measurement():
  from specjax.apps import card
  rounds = {1: 20.0, 2: 16.0}
  choice = auto_k.choose(_table(1.0, {1: 2.0, 2: 3.0}), rounds, 32, batch=1)
  fields = {"prompt": "p", "output": "o", "target": "t", "draft": "d", "k": choice["k"],
            "k_auto": True, "k_note": choice["note"], "predicted_speedup": choice["predicted"],
            "temperature": 0.0, "new_tokens": 8, "target_passes": 8, "draft_passes": 0,
            "acceptance_rate": None, "tokens_per_pass": None, "closed_form_tokens_per_pass": None,
            "speculative_tokens_per_s": 10.0, "target_tokens_per_s": 10.2,
            "identical_to_target": True, "speedup": 0.98}
  lines = card.format_card(fields).splitlines()
  k_line = next(x for x in lines if x.startswith("k "))
  assert "target alone (auto: target alone: no k pays at batch 1 (predicted 0.78" in k_line
  speed = next(x for x in lines if x.startswith("speedup"))
  assert speed.endswith("0.98x (measured in this run; predicted 1.00x)")
  fields.update(k=2, k_note="k=2 at batch 1 (predicted 1.20x the target alone)",
                predicted_speedup=1.2, speedup=1.15)
  text = card.format_card(fields)
  assert "k                    2 (auto: k=2 at batch 1" in text and "predicted 1.20x)" in text


def test_costs_keep_each_settings_fastest_run():
  """A load spike during one target-alone run (3x slower) and one k = 1 run must not set
  the costs: each setting keeps its fastest of the round-robins, and r_k >= r_0."""
  seen = []

  def run(k, n):
    seen.append((k, n))
    slow = 3.0 if len(seen) in (4, 8) else 1.0  # timed run 1 (k=0) and 5 (k=1)
    r = {0: 1.0, 1: 1.2, 2: 1.8}[k] * slow
    return types.SimpleNamespace(rounds=np.array([10]), prefill_time_s=0.5, wall_time_s=0.5 + 10 * r)
  t = loop_costs.measure(run, (1, 2), repeats=2, tokens=16)
  assert seen == [(0, 2), (1, 2), (2, 2)] + [(0, 16), (1, 16), (2, 16)] * 2
  assert t["0"]["round_s"] == pytest.approx(1.0)
  assert [t[k]["measured_ratio"] for k in ("1", "2")] == pytest.approx([1.2, 1.8])
  assert t["1"]["round_s"] == pytest.approx(1.2) and t["2"]["round_s"] == pytest.approx(1.8)


def test_round_ratios_smoothed_by_a_line_that_never_falls():
  line = loop_costs.smooth_ratios({1: 1.67, 2: 2.08, 3: 1.64, 4: 2.59})  # a noisy k = 3
  assert [round(line[k], 3) for k in (1, 2, 3, 4)] == [1.647, 1.879, 2.111, 2.343]  # 1.415 + 0.232 k
  flat = loop_costs.smooth_ratios({1: 1.5, 2: 1.2, 3: 1.1})  # falling: the mean, flat
  assert list(flat.values()) == pytest.approx([3.8 / 3] * 3)
  assert loop_costs.smooth_ratios({1: 0.9, 2: 1.3}) == {1: 1.0, 2: 1.3}  # floored at 1


def test_prompt_classes_and_batch_buckets():
  assert [loop_costs.batch_bucket(b) for b in (1, 2, 3, 4, 5, 32, 33)] == [1, 2, 4, 4, 8, 32, 64]
  # prompts up to 256 tokens share a calibration; longer ones get theirs
  assert [loop_costs.prompt_class(n) for n in (1, 60, 200, 256, 257, 1000, 1100)] == \
      [256, 256, 256, 256, 1024, 1024, 4096]
