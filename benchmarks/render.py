"""``BENCHMARKS.md`` rendered from the JSON records under ``benchmarks/records/``, so it never drifts
from what was measured.

Each section comes from one record: a short prose explanation (fixed text: what is measured and
how to read it), the figures as tables, and the record's machine, versions, date and the command
that reproduces it. A full-mode record (``benchmarks/records/<name>.json``) is preferred; without one, the
quick-mode record (``benchmarks/records/quick/<name>.json``) is rendered and marked as such. A benchmark
with no record gets no section. Records of unknown layout are rendered generically (their scalar
figures). Hand-written observations about a record's figures live in ``benchmarks/notes/<name>.md``
and are placed, marked as such, under the generated tables.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import portable

Rec = dict[str, Any]

ORDER = ("latency", "spread", "tail", "predictor", "transfer", "transfer_many", "agent", "search", "contention",
         "reliability", "sampler", "screening", "scale", "fidelity", "reference_noise", "supernet", "references",
         "deployment", "cifar10_deploy")
TITLES = {
    "latency": "Latency measurement", "spread": "Latency across searches: the final latency pass",
    "tail": "Tail latency, batches and throughput",
    "predictor": "Latency predictor",
    "transfer": "A predictor for a new device from a few measurements",
    "transfer_many": "A predictor for a new device from several devices' predictors",
    "agent": "Measurement agent overhead",
    "search": "Search overhead",
    "contention": "Measurement under load", "reliability": "Reliability (fault injection)",
    "sampler": "Sampler quality", "screening": "Predictor-driven screening speed",
    "scale": "Search throughput and scale", "references": "Searched vs hand-designed networks",
    "fidelity": "Proxy fidelity on CIFAR-10",
    "reference_noise": "Proxy fidelity: how reproducible the reference is",
    "supernet": "One-shot accuracy on CIFAR-10: a weight-sharing supernet",
    "deployment": "Deployment variants on CIFAR-10: INT8 and pruning",
    "cifar10_deploy": "Searched vs hand-designed networks on CIFAR-10 at the deployment budget",
}


def load_records(records: Path) -> dict[str, Rec]:
    """Name -> record, full-mode records preferred over quick ones."""
    out: dict[str, Rec] = {}
    for base, quick in ((records / "quick", True), (records, False)):
        for p in sorted(base.glob("*.json")):
            rec = json.loads(p.read_text())
            if not isinstance(rec, dict):
                continue
            rec.setdefault("mode", "quick" if quick else "full")
            out[p.stem] = rec
    return out


def _f(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def meta(rec: Rec) -> str:
    """The record's provenance: date, machine, versions, command, mode."""
    m = rec.get("machine") or rec.get("environment") or {}
    v = rec.get("versions") or {}
    if not v and "environment" in rec:
        v = {k: rec["environment"][k] for k in ("torch", "onnxruntime", "numpy") if k in rec["environment"]}
    cmd = rec.get("command", "")
    if isinstance(cmd, list):
        cmd = " ".join(cmd)
    cmd = portable(cmd)  # a folder outside the repository is the reader's choice, not part of the command
    date = rec.get("date") or rec.get("created") or "?"
    cpus = m.get("cpus_usable", "?")
    load = m.get("load_average")
    load_s = f", load average {'/'.join(_f(x) for x in load)} at the end" if load else ""
    if not load and "load_average_before" in rec:  # records that keep the 1-minute load at both ends
        load_s = (f", load average {_f(rec['load_average_before'])} before and "
                  f"{_f(rec.get('load_average_after'))} after")
    vers = ", ".join(f"{k} {val}" for k, val in v.items() if val != "not installed")
    mode = " (quick mode)" if rec.get("mode") == "quick" else ""
    wall = f"; took {rec['wall_seconds']:.0f} s" if "wall_seconds" in rec else ""
    return (f"*Measured {date}{mode} on {m.get('cpu_model', '?')}, {cpus} usable CPUs{load_s}; "
            f"Python {m.get('python', '?')}; {vers}{wall}.*\n\nReproduce:\n\n    {cmd}")


def _latency(rec: Rec) -> str:
    r, o, a = rec["repeatability"], rec["overhead"], rec["agreement"]
    procs = r["processes"]
    rows = [[str(i + 1), _f(p["p50_ms"]), _f(p["min_ms"]), _pct(p["iqr_rel"]), _f(p["cpu_per_wall"]),
             str(p["attempts"]), _f(p["stable"])] for i, p in enumerate(procs)]
    rep = table(["process", "p50 ms", "min ms", "IQR/median", "CPU share", "attempts", "stable"], rows)
    ov = table(["call", "build s", "ONNX export s", "session s", "measurement s", "setup / measurement"],
               [["first in the process" if i == 0 else "next", _f(c["build_s"]), _f(c["export_s"]),
                 _f(c["session_s"]), _f(c["measure_s"]), _f(c["setup_over_measure"])]
                for i, c in enumerate(o["calls"])])
    ag = table(["network", "ONNX Runtime p50 ms", "torch p50 ms", "torch / ONNX Runtime"],
               [[x["arch"], _f(x["onnxruntime_p50_ms"]), _f(x["torch_p50_ms"]), _f(x["torch_over_onnxruntime"])]
                for x in a["rows"]])
    gpu = rec.get("gpu", {})
    gpu_s = (f"**GPU**: skipped ({gpu['skipped']})." if "skipped" in gpu else
             "**GPU** (torch CUDA eager against CUDA graphs):\n\n" + table(
                 ["precision", "eager p50 ms", "graphs p50 ms", "eager / graphs"],
                 [[x["precision"], _f(x["eager_p50_ms"]), _f(x["graphs_p50_ms"]), _f(x["eager_over_graphs"])]
                  for x in gpu.get("rows", [])]))
    stable = r.get("max_over_min_p50_stable_only")
    return f"""The measurement protocol's own quality: the same network (`{r['arch']}`, {r['input_shape']}, ONNX Runtime
CPU, one thread) measured by `python -m latency_predictor.measure` in {len(procs)} fresh processes one after
the other; what preparing a measurement costs against the measurement itself; and how ONNX Runtime and
eager PyTorch disagree on the same networks. On a shared machine, processes that did not get the CPU
(CPU share under 0.9) are flagged unstable and repeated; read the figures with the load in mind.

**Repeatability**: max/min of p50 over all processes **{_f(r['max_over_min_p50'], 3)}**; over the
{r['stable_processes']} stable ones {_f(stable, 3)}; max/min of the fastest run (min) {_f(r['max_over_min_min'], 3)}.

{rep}

**Overhead** ({o['arch']}, in one process):

{ov}

**Agreement** (both one thread, same network). They should not be expected to agree: ONNX Runtime folds
BatchNorm, fuses activations and runs blocked-layout kernels; eager PyTorch runs every module. Compare
candidates on one backend, the one you deploy with.

{ag}

{gpu_s}"""


def _predictor(rec: Rec) -> str:
    rep, s, tp = rec["report"], rec["splits"], rec["throughput"]
    rows = [[name, _f(m["rmse_ms"]), _pct(m["mape"]), _pct(m["within_5"]), _pct(m["within_10"]),
             _f(m["spearman"], 3), _pct(m["max_rel_error"])] for name, m in rep["models"].items()]
    noise = rep.get("noise", {})
    col = rec.get("collection", {})
    met = rec.get("met", {})
    targets = ", ".join(f"{k} {'met' if v else 'missed'}" for k, v in met.items())
    return f"""The learned latency predictor (a sum of per-unit costs) against two baselines (latency proportional
to MACs; a per-block lookup table), trained on {rep['n_train']} and tested on {rep['n_test']} held-out
`{rec['settings']['space']}` architectures measured with ONNX Runtime on the CPU (1 thread,
1x3x224x224; {_f(col.get('archs'))} architectures, {_f(col.get('records'))} measurements). The noise ceiling is
the +-10% share a perfect predictor would reach given the measurement noise.

{table(['model', 'RMSE ms', 'MAPE', 'within 5%', 'within 10%', 'Spearman', 'max error'], rows)}

Noise ceiling (+-10%): {_pct(noise.get('ceiling_10'))} ({noise.get('basis', '')}). Over {s['n']} random
80/20 splits: +-10% mean {_pct(s['within_10_mean'])} (min {_pct(s['within_10_min'])}), Spearman mean
{_f(s['spearman_mean'], 3)} (min {_f(s['spearman_min'], 3)}).

**Throughput**: {_f(tp['first_call_per_s'], 0)} predictions/s on a batch of {_f(tp['n'])} (first call, empty
caches), {_f(tp['second_call_per_s'], 0)}/s the second time; one `measure()` call {_f(tp['single_measure_ms'], 3)} ms.
Targets (+-10% >= 95%, Spearman >= 0.95, >= 10,000 predictions/s): {targets}."""


def _transfer(rec: Rec) -> str:
    st, goal, devices = rec["settings"], rec["goal"], rec["devices"]
    dev = table(["device", "what", "usable architectures"],
                [[k, d["label"], _f(d["usable_archs"])] for k, d in devices.items()])

    def cell(m: dict[str, float]) -> str:
        return f"{_pct(m['within_10'])} / {_f(m['spearman'], 3)}"

    header = ["source -> target", f"full ({st['n_full']})", "source as is"]
    for n in st["shots"]:
        header += [f"adapted, n={n}", f"adapted, random {n}", f"scratch, random {n}"]
    rows = []
    for p in rec["pairs"]:
        row = [f"{p['source']} -> {p['target']}", cell(p["full"]), cell(p["source_as_is"])]
        for n in st["shots"]:
            v = p["by_n"][str(n)]
            row += [cell(v["adapted_informative"]), cell(v["adapted_random"]), cell(v["scratch_random"])]
        rows.append(row)
    met = [p for p in rec["pairs"] if p.get("goal_met")]
    gn = str(goal["n"])
    parts = ""
    if all("scales_only_informative" in p["by_n"].get(gn, {}) for p in rec["pairs"]):
        prow = [[f"{p['source']} -> {p['target']}"]
                + [cell(p["by_n"][gn][k]) for k in ("adapted_informative", "scales_only_informative",
                                                     "adapted_random", "scales_only_random")]
                + ["met" if p.get("goal_met") else "not met"] for p in rec["pairs"]]
        parts = f"""

At n = {gn}, what the per-feature refinement adds to the group scales, for the chosen and for random
architectures:

{table(['source -> target', 'adapted', 'scales only', 'adapted, random', 'scales only, random', 'goal'], prow)}"""
    return f"""A predictor for a device from n measurements there, adapted from another device's predictor
(`python -m latency_predictor.train --adapt-from`: per-group scales and the device's overheads refitted,
then each operator's cost refined; the method is described in `docs/predictor.md`), against a
predictor fitted from scratch on the same n and the full predictor fitted on {st['n_full']} measurements
of the target.
"Devices" with different latency profiles stand in for real ones:

{dev}

Each cell is the share of {st['n_test']} held-out `{st['space']}` architectures predicted within +-10%, then the
Spearman rank correlation, averaged over {st['splits']} random held-out splits. "adapted, n" measures the n
architectures `collect --adapt-from` chooses (most informative first: the most typical, then, in turn,
those that cover the rest and those that tell the scales apart); "random n": n chosen at random
({st['reps']} draws per split); "source as is": the source device's predictor unchanged.

{table(header, rows)}

Goal at n = {goal['n']} (adapted): Spearman >= {goal['spearman']} and +-10% >= {_pct(goal['within_10'])}: met by
{len(met)} of {len(rec['pairs'])} pairs.{parts}"""


def _transfer_many(rec: Rec) -> str:
    st, goal = rec["settings"], rec["goal"]

    def cell(m: dict[str, float]) -> str:
        return f"{_pct(m['within_10'])} / {_f(m['spearman'], 3)}"

    gn = str(goal["n"])
    header = ["first -> target"]
    for n in st["shots"]:
        header += [f"first alone, n={n}", f"mix, n={n}"]
    header += [f"weights at n={gn}", "goal"]
    rows = []
    for p in rec["pairs"]:
        row = [f"{p['first']} -> {p['target']}"]
        for n in st["shots"]:
            row += [cell(p["by_n"][str(n)]["first"]), cell(p["by_n"][str(n)]["mix"])]
        w = p["by_n"].get(gn, {}).get("weights", {})
        row += [", ".join(f"{k} {v:.2f}" for k, v in sorted(w.items(), key=lambda kv: -kv[1])),
                "-" if p.get("goal_met") is None else "met" if p["goal_met"] else "not met"]
        rows.append(row)
    means = []
    for n in st["shots"]:
        a = [p["by_n"][str(n)]["first"]["within_10"] for p in rec["pairs"]]
        b = [p["by_n"][str(n)]["mix"]["within_10"] for p in rec["pairs"]]
        means.append(f"n = {n}: {_pct(sum(a) / len(a))} alone, {_pct(sum(b) / len(b))} mixed")
    met = [p for p in rec["pairs"] if p.get("goal_met")]
    return f"""The same devices, splits and held-out architectures as the section above, with every other device's
predictor as a source: `python -m latency_predictor.train --adapt-from FIRST OTHER ...` adapts each with the
same n measurements of the target (those `collect --adapt-from FIRST` chooses) and mixes them, weighted so
that the mix's leave-one-out error is least. "first alone" is FIRST adapted by itself with the same n (the
section above's "adapted"). Each cell: +-10% share / Spearman on {st['n_test']} held-out architectures, averaged
over {st['splits']} splits; the weights are averaged over the splits.

{table(header, rows)}

Mean +-10% share over the {len(rec['pairs'])} rows: {'; '.join(means)}.
Goal at n = {gn} (the mix): Spearman >= {goal['spearman']} and +-10% >= {_pct(goal['within_10'])}: met by
{len(met)} of {len(rec['pairs'])}."""


def _agent(rec: Rec) -> str:
    f, st = rec["figures"], rec["settings"]
    rows = [[r["network"], _f(r["local_p50_ms"], 3), _f(r["agent_p50_ms"], 3), _f(r["p50_ratio"], 4),
             f"{_f(r['transport_s']['median'] * 1e3, 1)} ms", f"{_f(r['local_wall_s'])} / {_f(r['agent_wall_s'])}"]
            for r in f["rows"]]
    shape = "x".join(map(str, st["input_shape"]))
    return f"""The same networks timed here and through a measurement agent on 127.0.0.1
(`python -m latency_predictor.agent`; ONNX Runtime on the CPU, one thread, {shape}), {st['rounds']} times each,
alternating which goes first. The ratio is the p50 through the agent over the p50 here (median over the
rounds); the transport is the client's wall time for a request minus the agent's own time for it (HTTP,
JSON, the server); the wall times are a whole candidate (build, export, session, timing) here and through the agent.

{table(['network', 'p50 here ms', 'p50 agent ms', 'ratio', 'transport', 'wall s here / agent'], rows)}

p50 ratio, median over the networks: **{_f(f['p50_ratio_median'], 4)}** (range {_f(f['p50_ratio_range'][0], 4)} -
{_f(f['p50_ratio_range'][1], 4)}; goal <= {f['goal_p50_ratio']}: {'met' if f['met'] else 'missed'}); transport
{_f(f['transport_s_median'] * 1e3, 1)} ms per candidate; a candidate's wall time through the agent over here:
{_f(f['wall_ratio_median'], 3)}."""


def _spread(rec: Rec) -> str:
    f, st = rec["figures"], rec["settings"]
    n = st["searches"]
    alone = "standalone" in f  # records from before the floor was measured have no standalone round
    kinds = ("in_search", "final", "standalone") if alone else ("in_search", "final")
    rows = [[r["arch_id"], *(cell for k in kinds for cell in (" / ".join(_f(v, 2) for v in r[k]),
                                                             _f(r[f"{k}_spread"], 3)))] for r in f["archs"]]
    labels = {"in_search": "in the search (the trial's own measurement)",
              "final": "final latency pass (what the leaderboard shows)",
              "standalone": "measured alone after each search (the host's floor)"}
    summary = table(["figures", "median spread", "largest spread", f"within {f['goal']}x"], [
        [labels[k], _f(f[k]["median_spread"], 3), _f(f[k]["max_spread"], 3), _pct(f[k]["within_goal"])]
        for k in kinds])
    heads = {"in_search": "in-search p50 ms", "final": "final p50 ms", "standalone": "alone p50 ms"}
    io = f["in_search_over_final"]
    floor = "" if not alone else f"""
The floor: right after each search, a fresh process with nothing else running measured the same
architectures with the same backend and protocol (as `python -m latency_predictor.measure` does). Its
spread is the host's own drift over the same minutes, which no measurement inside a search can go under:
{'within' if f['floor_met'] else 'not within'} {f['goal']}x for every architecture."""
    return f"""The quickstart (`python -m nas.search +space=mobile target_ms=50`: digits, ONNX Runtime on the CPU,
one thread, 1x3x224x224, two trials at a time) run {n} times, one after another, each in a fresh process and
project home, with the random sampler and seed {st['seed']} so that every search evaluates the same
{st['trials']} architectures, and the final latency pass measuring all of them again. For each architecture,
its p50 (ms) in search 1 / 2 / ..., and the spread across the searches (largest / smallest): as its trial
measured it, with the other trial training beside it, and as the final pass measured it, with nothing else
running.

{table(['arch_id', *(h for k in kinds for h in (heads[k], 'spread'))], rows)}

{summary}

Goal: the leaderboard's figures repeat across searches within {f['goal']}x for every architecture:
{'met' if f['met'] else 'missed'}. Within a search, in-search p50 over final p50: median {_f(io['median'], 3)},
range {_f(io['min'], 3)} - {_f(io['max'], 3)}.{floor}"""


def _ci(ci: list[float] | None) -> str:
    return "-" if not ci else f"{_f(ci[0], 3)} - {_f(ci[1], 3)}"


def _tail(rec: Rec) -> str:
    f, st = rec["figures"], rec["settings"]
    pr = f["percentiles"]
    rows = [[r["network"], b, _f(r[b]["p50"], 3), _ci(r[b]["ci95_p50"]), _f(r[b]["p99"], 3), _ci(r[b]["ci95_p99"]),
             _f(r[b]["p99_over_p50"], 2), _f(r[b]["n"])] for r in pr["rows"] for b in ("onnxruntime", "torch")]
    ratios = "; ".join(f"{b}: median {_f(v['median'], 2)} (range {_f(v['min'], 2)} - {_f(v['max'], 2)})"
                       for b, v in pr["p99_over_p50"].items())
    pre = f.get("preprocessing")
    pre_head = "\n\n**The input pipeline** (`latency.preprocessing`, same protocol, one thread):\n\n"
    pre_text = "" if not pre else pre_head + table(
        ["pipeline", "p50", "95% CI", "p99", "95% CI", "runs"],
        [[r["pipeline"], _f(r["p50"], 3), _ci(r["ci95_p50"]), _f(r["p99"], 3), _ci(r["ci95_p99"]), _f(r["n"])]
         for r in pre["rows"]])
    th = f["throughput"]
    ts = th.get("stat", "p99")
    bounds = [f"{b:g}" for b in th["bounds_ms"]]
    trows = []
    for r in th["rows"]:
        per = r["per_batch"]
        cells = [f"{_f(per[str(b)][ts], 2)}" for b in th["batches"]]
        best = [f"{p['batch'] or 'none'}: {_f(p['throughput_per_s'], 0)}/s" for p in (r["bounds"][k] for k in bounds)]
        trows.append([r["network"], *cells, *best])
    pred = f["predictor"]
    prow = [[stat, _f(pred[stat]["n_train"]), _f(pred[stat]["n_test"]), _pct(pred[stat]["additive"]["mape"]),
             _pct(pred[stat]["additive"]["within_10"]), _f(pred[stat]["additive"]["kendall"], 3),
             _pct(pred[stat]["macs"]["within_10"]), _pct(pred[stat]["noise_ceiling_10"])] for stat in ("p50", "p99")]
    pheader = ['statistic', 'trained on', 'held out', 'MAPE', 'within 10%', 'Kendall', 'MACs within 10%',
               'noise ceiling 10%']
    s = f["search"]
    checks = ", ".join(_f(c["p99"], 3) for c in s["remeasured"])
    proto = st["protocol"]
    return f"""What a deployment states its target in: the tail, batches, throughput within a bound. ONNX Runtime and
PyTorch eager on this machine's CPU, one thread, at CIFAR-10's shape 1x3x32x32; every measurement times at least
{_f(proto['min_runs'])} runs (the p99 protocol, `latency.target_stat=p99`), so about 10 runs lie beyond each p99.
Networks: the hand-designed references in their 32x32 layouts and the winner of the p99 search below
(with the CIFAR-10 comparison's searched networks when that benchmark has run). Confidence intervals are
95%, distribution-free (order statistics of the timed runs).

**p50 and p99 at batch 1** (ms):

{table(['network', 'backend', 'p50', '95% CI', 'p99', '95% CI', 'p99 / p50', 'runs'], rows)}

p99 / p50 per backend: {ratios}.{pre_text}

**Throughput within a {ts} bound** (ONNX Runtime; each batch timed with the {ts} protocol): the {ts} (ms) of
each batch, and for each bound the batch with the most images per second whose {ts} stays within it
(`latency.scenario=server`):

{table(['network', *[f'b{b} {ts}' for b in th['batches']], *[f'best within {b} ms' for b in bounds]], trows)}

**The predictor on p99 vs p50**: {_f(pred['n'])} architectures of `{pred['space']}` measured once with the p99
protocol ({_f(pred['collect_s'], 0)} s); a predictor trained on each statistic, same split:

{table(pheader, prow)}

**A search at a p99 target** of {_f(s['target_ms'], 3)} ms (the p99 of MobileNetV2 x0.5, ONNX Runtime, measured first):
{s['trials']} trials on `mobile_cifar` at 32x32 (the quickstart's data and recipe) with `latency.target_stat=p99`.
Winner {s['winner_id']}: p99 {_f(s['search_p99'], 3)} ms in the search{' (final pass)' if s['final_pass'] else ''};
measured again here in {len(s['remeasured'])} fresh sessions: {checks} ms, {sum(s['met'])} of {len(s['met'])}
within the target."""


def _search(rec: Rec) -> str:
    o = rec["overhead"]
    ov = table(["figure", "value"], [
        ["overhead per trial", f"{_f(o['overhead_per_trial_seconds'])} s"],
        ["of which MLflow logging (driver callback)", f"{_f(o['of_which_mlflow_logging_seconds'], 3)} s"],
        ["of which artifacts", f"{_f(o['of_which_artifacts_seconds'], 3)} s"],
        ["share of the measured trial", _pct(o["share_of_measured_trial"])],
        ["share of a 10 s trial", f"{_pct(o['share_of_10s_trial'])} (target <= {_pct(o['target_share'])})"],
    ])
    trial_s = _f(o["mean_trial_seconds"], 1)
    text = f"""**Framework overhead per trial**: a real search of {o['n_trials']} trials of {trial_s} s
each ({o['setup']}). Overhead is `Tuner.fit` wall time minus the trials' own time (measured inside each
trial), plus writing and logging the artifacts, per trial: Ray's scheduling, worker start-up (amortised),
the sampler, result transport and MLflow logging all count. `reuse_actors=True` and no per-trial result
files keep it low.

{ov}"""
    q = rec.get("quickstart")
    if q:
        text += f"""

**Quickstart**, `{q['command']}` exactly as written, in a fresh folder (new MLflow store):
**{_f(q['wall_seconds'], 0)} s** wall (limit 10 minutes), of which {_f(q['startup_seconds'], 0)} s start-up and
{_f(q['tune_seconds'], 0)} s of trials; {q['n_completed']} candidates completed, {q['n_failed']} failed; best reward
{_f(q['best_reward'], 3)} at {_f(q['best_latency_ms'], 1)} ms p50."""
    return text


def _sampler(rec: Rec) -> str:
    f = rec["figures"]
    names = list(next(iter(f["results"].values())))
    rows = []
    for b, row in f["results"].items():
        for n in names:
            e = row[n]
            br = e["best_reward"]
            vs = e.get("vs_random")
            rows.append([b, n, _f(br["median"]), f"{_f(br['q25'])} - {_f(br['q75'])}",
                         f"{_f(br['min'])} - {_f(br['max'])}",
                         f"{vs['wins']}/{vs['ties']}/{vs['losses']}" if vs else "-"])
    top = str(max(f["budgets"]))
    ranked = sorted(names, key=lambda n: -f["results"][top][n]["best_reward"]["median"])
    beats = [f"{n} {f['results'][top][n]['vs_random']['wins']}/{f['seeds']}" for n in ranked
             if "vs_random" in f["results"][top][n]]
    verdict = (f"At {top} evaluations, by median best reward: {' > '.join(ranked)}; seeds on which each beats "
               f"random search: {', '.join(beats)}.")
    return f"""Which search algorithm finds the best reward for the same number of evaluated architectures? On the
`mobile` space, with {f['latency']} and, as the cheap accuracy estimate, the {f['accuracy_estimate']}. The
reward is {f['reward']} at target_ms = **{_f(f['target_ms'])}**, the {f['target_rule']}, so about half the
space meets it. Budgets {', '.join(map(str, f['budgets']))} distinct architectures, {f['seeds']} seeds each
(budgets are prefixes of one run); "vs random" counts seeds where the sampler's best is higher / equal /
lower than random search's with the same seed. TPE starts with {f['settings']['tpe_startup_trials']} random
trials and NSGA-II's first generation ({f['settings']['nsga2_population']}) is random too: with the same seed
they draw what random search draws, hence ties at small budgets. Rewards are NASWOT scores (about 300 for
this batch), so differences of a few units are real but small.

{table(['budget', 'sampler', 'median best reward', 'IQR', 'range', 'vs random (W/T/L)'], rows)}

{verdict}

{f['distinct_archs_scored']} distinct architectures scored, {_f(f['seconds_per_scored_arch'], 2)} s each."""


def _screening(rec: Rec) -> str:
    f = rec["figures"]
    w = "measured" if f["wall_1000_measured"] else f"projected from {f['n']} candidates"
    per = {k: _f(f["naswot_seconds_per_arch"][k], 3) for k in ("median", "q25", "q75")}
    return f"""How fast a search can screen candidates without training or measuring: predicted latency (the learned
predictor, one batch) plus the NASWOT score (build the network, one forward pass), over {f['n']} uniformly
sampled `mobile` architectures on one CPU thread.

{table(['part', 'candidates per second'], [
        ['predicted latency only', _f(f['latency_only_per_s'], 0)],
        ['NASWOT only', _f(f['naswot_per_s'])],
        ['both (sampling included)', _f(f['combined_per_s'])],
    ])}

NASWOT per network: median {per['median']} s (IQR {per['q25']} - {per['q75']} s).
**1,000 candidates: {_f(f['wall_seconds_1000'], 0)} s** ({w}); the
latency prediction is a negligible part, building each network and its forward pass are the cost."""


def _scale(rec: Rec) -> str:
    f = rec["figures"]
    p = f["projection"]
    rows = [[str(r["workers"]), f"{r['n_completed']}/{r['n_trials']}", _f(r["tune_seconds"], 0),
             _f(r["startup_seconds"], 0), _f(r["mean_trial_seconds"], 1), _f(r["candidates_per_hour"], 0)]
            for r in f["runs"]]
    assumptions = "\n".join(f"- {a}" for a in p["assumptions"])
    return f"""Search throughput on this machine: two real searches (`{f['space']}` space, Ray Tune + Optuna TPE, MLflow
in a temporary store; a trial: {f['trial']}, {f['epochs']} epoch(s)) with one and two trials at a time.
Candidates per hour count completed candidates over `Tuner.fit` time; start-up is paid once per search.

{table(['workers', 'completed', 'trials s', 'start-up s', 'mean trial s', 'candidates/h'], rows)}

Two workers against one: **{_f(f['speedup_2_over_1'])}x** (on two cores the second worker competes with
the driver, Ray's own processes and anything else running).

**Projection** to {p['nodes']} nodes x {p['gpus_per_node']} GPUs ({p['workers']} workers) from the one-worker
per-trial costs: {_f(p['per_worker_candidates_per_hour'], 0)} candidates/h per worker, driver limit
{_f(p['driver_limit_candidates_per_hour'], 0)}/h, so **{_f(p['candidates_per_hour'], 0)} candidates/h** (bound by
the {p['bound']}). Assumptions:

{assumptions}"""


def comparison_lines(targets: list[dict[str, Any]]) -> list[str]:
    """The searched network against each reference (accuracy at each target; latency at matched accuracy)."""
    lines = []
    searched_all = [c for t in targets for c in t["candidates"] if c["name"] == "searched"]
    for t in targets:
        s = next(c for c in t["candidates"] if c["name"] == "searched")
        for c in t["candidates"]:
            if c is s:
                continue
            d = s["accuracy"]["median"] - c["accuracy"]["median"]
            apart = s["accuracy"]["min"] > c["accuracy"]["max"] or c["accuracy"]["min"] > s["accuracy"]["max"]
            lines.append(f"at {t['target_ms']:g} ms, searched ({s['latency_ms']:.2f} ms) vs {c['name']} "
                         f"({c['latency_ms']:.2f} ms): accuracy {100 * d:+.1f} points (medians; the seed ranges "
                         f"{'do not overlap' if apart else 'overlap'})")
    seen = set()
    for c in (c for t in targets for c in t["candidates"] if c["name"] != "searched"):
        if (c["name"], c["latency_ms"]) in seen:
            continue
        seen.add((c["name"], c["latency_ms"]))
        ok = [s for s in searched_all if s["accuracy"]["median"] >= c["accuracy"]["median"]]
        if not ok:
            lines.append(f"at matched accuracy: no searched network reached {c['name']}'s "
                         f"{100 * c['accuracy']['median']:.1f}%")
            continue
        f = min(ok, key=lambda s: s["latency_ms"])
        ratio = c["latency_ms"] / f["latency_ms"]
        how = f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"
        acc = 100 * c["accuracy"]["median"]
        lines.append(f"at matched accuracy: {c['name']} ({acc:.1f}%, {c['latency_ms']:.2f} ms)"
                     f" against the fastest searched network at least as accurate ({f['latency_ms']:.2f} ms): "
                     f"the searched one is {how}")
    return lines


def _references(rec: Rec) -> str:
    f = rec["figures"]
    matched = "\n".join(f"- {line}" for line in comparison_lines(f["targets"]))
    if f.get("dataset") == "cifar10":
        return _references_cifar10(f, matched)
    rows = []
    for t in f["targets"]:
        for c in t["candidates"]:
            acc = c["accuracy"]
            rows.append([f"{t['target_ms']:g}", c["name"], _f(c["latency_ms"]), _f(c.get("params_m"), 2),
                         f"{_pct(acc['median'])} ({_pct(acc['min'])} - {_pct(acc['max'])})"])
    over = [f"at {t['target_ms']:g} ms the searched network measured {c['latency_ms']:.2f} ms" for t in f["targets"]
            for c in t["candidates"] if c["name"] == "searched" and c["latency_ms"] > t["target_ms"]]
    if over:
        matched += ("\n\nThe searched networks missed their targets when measured here (" + "; ".join(over)
                    + "): none of the candidates measured met the target under this run's load, so the fastest "
                    "measured is shown, and the latencies are not exactly matched.")
    weak = [c["name"] for t in f["targets"] for c in t["candidates"] if c["accuracy"]["median"] < 0.5]
    if weak:
        matched += (f"\n\nWith {f['epochs']} epoch(s), {', '.join(sorted(set(weak)))} stayed under 50% accuracy: "
                    "deep, narrow networks barely start to learn in so short a budget (same optimiser and learning "
                    "rate for every network), so this compares what each network learns in a very short budget, "
                    "not what it can reach.")
    return f"""Does the search find networks that beat hand-designed ones at the same latency? At two latency targets on
this machine's ONNX Runtime CPU (1 thread, 1x3x224x224, measured), the best network of a small search
({f['search']}) against the reference networks width-scaled (channels x multiplier, rounded to 8) to the
largest multiplier that meets the target. All trained with the same budget on the same proxy data
({f['training']}), {f['seeds']} training seeds; accuracy median (min - max).

{table(['target ms', 'network', 'latency ms', 'params M', 'accuracy'], rows)}

{matched}

Digits is a weak proxy for ranking (one test image is 0.28 points, and seed-to-seed spread is about
as large as the differences between architectures); treat small differences as ties."""


def _references_cifar10(f: dict[str, Any], matched: str) -> str:
    s = f["targets"][0]["candidates"][0]["search"]
    st = s["settings"]
    exports = sorted({c["export_folder"] for t in f["targets"] for c in t["candidates"] if c.get("export_folder")})
    widths = " and ".join(f"{w:g}" for w in f["target_widths"])
    rows = [[f"{t['target_ms']:g}", c["name"], _f(c["latency_ms"], 3), _f(c["latency_ratio"], 2),
             "yes" if c["meets_target"] else "no", _f(c.get("params_m"), 2),
             f"{_pct(c['accuracy']['median'])} ({_pct(c['accuracy']['min'])} - {_pct(c['accuracy']['max'])})"]
            for t in f["targets"] for c in t["candidates"]]
    header = ["target ms", "network", "latency ms", "x anchor", "meets", "params M", "accuracy"]
    missed = [f"{c['name']} at {t['target_ms']:g} ms ({c['latency_ratio']:.2f}x"
              + (", even at the smallest width tried" if c["multiplier"] == 0.25 else "") + ")"
              for t in f["targets"] for c in t["candidates"] if not c["meets_target"]]
    how = f"""Each target's *anchor* is the MobileNetV2 that set it. This host's speed moves between levels about 2x
apart within seconds, so no network is judged by one absolute figure: each is measured back to back
with its anchor, and *x anchor* is the median over the rounds of its p50 over the anchor's ({f['rounds']}
rounds at the end of the run; the widths were chosen the same way at the start, {f['scale_rounds']}
rounds each). A network meets its target when it is no slower than the anchor (x anchor <= 1).
{"Slower than the anchor at the end: " + "; ".join(missed) + "." if missed else "Every network met its target."}"""
    budget = (f"These are short-budget accuracies ({f['train_samples']:,} images x {f['epochs']} epochs): "
              "they compare what each network learns in that budget, not what it reaches with full training.")
    return f"""The same question on real images. At two latency targets on this machine's ONNX Runtime CPU (1 thread,
CIFAR's deployment shape 1x3x32x32, every network measured in this run), chosen as the measured
latencies of MobileNetV2 in its 32x32 layout at widths {widths}: LatNAS's own search of
`mobile_cifar` ({f['search_n']} candidates, its CIFAR-10 defaults: {st['accuracy']} estimate,
{st['train.epochs']} epochs on {st['data.max_train_samples']} images, {st['sampler']} sampler)
against MobileNetV2, EfficientNet-B0 and MnasNet-B1 in their 32x32 layouts (the first two stride-2
stages run at stride 1), each width-scaled to the widest multiplier that meets the target. Every
network trained with the same recipe and budget ({f['train_samples']:,} CIFAR-10 training images,
{f['epochs']} epochs), {f['seeds']} seeds, validated on {f['val_images']:,} images carved from the
training split; accuracy median (min - max). The JPEG copy of CIFAR-10 differs slightly from the
original release: accuracies are close to, not identical with, published figures. Latency: {f['latency']}.

{table(header, rows)}

{how}

{matched}

{budget}

The trained networks (seed 0) are committed as `model.onnx` (Conv+BN fused, checked against
PyTorch) with `arch.json` (architecture, preprocessing, classes, accuracy, latency) in
{', '.join(f'`{e}`' for e in exports) or 'no folder (quick mode)'}: evaluate and time them on the
real CIFAR-10 test split."""


def _contention(rec: Rec) -> str:
    rows = [[cond, _f(x["p50_ms"]), f"{_f(x['p50_min_ms'])} - {_f(x['p50_max_ms'])}", _f(x["min_ms"]),
             _f(x.get("ratio_to_alone")), f"{x['stable']}/{x['n']}", _f(x["cpu_per_wall"]), _f(x["slot_wait_s"]),
             _f(x.get("search_cores"))]
            for cond, x in rec["summary"].items()]
    load = rec.get("search_load", {})
    net = rec.get("arch_name", rec.get("arch"))
    paired = rec.get("slot_over_no_slot_paired")
    return f"""Does a measurement stay trustworthy while a search trains other candidates on the same machine? The
same network (`{net}`, ONNX Runtime CPU, one thread, 1x3x224x224, one attempt of the protocol each) is
measured {rec['rounds']} times alone; then, while a real search runs in another process
({load.get('concurrent_trials', '?')} concurrent trials of the `{load.get('space', '?')}` space, one CPU
each), in {rec['rounds']} rounds of two measurements in alternating order: with the measurement slot (as
trials measure: it waits for the search's measurements and running training steps, and holds new steps
back) and without it; then alone again. *Search cores* is how many cores the search's processes used
while the measurement ran. Paired by round, the p50 with the slot was **{_f(paired)}x** the p50 without it.

{table(['condition', 'median p50 ms', 'p50 range', 'min ms', 'x alone', 'stable', 'CPU share',
        'slot wait s', 'search cores'], rows)}"""


def _reliability(rec: Rec) -> str:
    st, f, checks = rec["settings"], rec["figures"], rec["checks"]
    how = {"SIGKILL": "driver SIGKILLed", "SIGINT": "Ctrl-C (SIGINT to its process group)", "none": "ran to the end"}
    starts = ["`python -m nas.search ...`", "the same with `resume=true`", "the resume command it printed"]
    phases = [[str(i + 1), starts[i] if i < len(starts) else "-", how.get(ph["signal"], ph["signal"]),
               str(ph["exit"]), _f(ph["seconds"], 0), str(ph["recorded"]), str(ph["processes_left"])]
              for i, ph in enumerate(rec["phases"])]
    failed = ", ".join(f"{k} {v}" for k, v in f["failed_by_type"].items()) or "none"
    figures = [
        ["architectures evaluated", str(f["trials"])], ["completed", str(f["completed"])],
        ["failed, with their reason", f"{f['failed']} ({failed})"],
        ["made to fail by the fault plan", str(f["bad_by_plan"])],
        ["trial processes killed / retried", f"{f['trial_processes_killed']} / {f['retried']}"],
        ["recorded candidates lost", str(f["lost"])], ["architectures recorded twice", str(f["duplicates"])],
        ["half-written runs marked KILLED", str(f["stale_runs_marked_killed"])],
        ["Optuna trials (evaluated architectures)", _f(f["optuna_trials"], 0)],
        ["Ray Tune trials of each run that closed its record",
         " / ".join(_f(x, 0) for x in f["ray_trials_per_phase_closed"])],
    ]
    bad = [k for k, ok in checks.items() if not ok]
    verdict = (f"All {len(checks)} checks passed" if not bad else f"FAILED checks: {', '.join(bad)}")
    verdict += ": " + ", ".join(k.replace("_", " ") for k in checks) + "."
    return f"""Does a search survive failing candidates, dying trial processes and a killed driver, and lose nothing?
One search of {st['n_trials']} architectures of the tiny space (digits, one epoch, ONNX Runtime at 1x3x32x32, two
trials at a time, `search.max_retries=1`, `search.trial_timeout_s={_f(st['trial_timeout_s'], 0)}`) with
`LATNAS_FAULTS={st['faults']}`: about {_pct(st.get('bad_rate'))} of the architectures fail (export, engine
build, measurement, out of memory, NaN training, a stall past the time limit, in equal shares) and
{_pct(st.get('kill_rate'))} have their trial process killed with SIGKILL once. The driver is SIGKILLed at a
third of the trials and resumed, then interrupted with Ctrl-C at two thirds and resumed again with the command
it printed. The record is then checked against the fault plan.

{table(['run', 'started as', 'ended', 'exit', 'seconds', 'candidates recorded', 'processes left'], phases)}

{table(['figure', 'value'], figures)}

{verdict} After the SIGKILL, the processes left are Ray's that the dead driver could not stop (the script ends
them); after Ctrl-C the search stops its own. After the Ctrl-C, Ray Tune's count includes the trials it stopped
unfinished, which are not recorded and run again on resume."""


def _generic(rec: Rec) -> str:
    flat: list[list[str]] = []

    def walk(prefix: str, x: Any) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if k not in ("machine", "versions", "environment", "command", "date", "created"):
                    walk(f"{prefix}{k}.", v)
        elif isinstance(x, int | float | str | bool) and len(flat) < 40:
            text = _f(x)
            flat.append([prefix.rstrip("."), text if len(text) <= 80 else text[:77] + "..."])

    walk("", rec.get("figures", rec))
    note = "Figures as recorded (this record's layout has no dedicated renderer):"
    return f"{note}\n\n" + table(["figure", "value"], flat)


def _fidelity(rec: Rec) -> str:
    f = rec["figures"]
    ests = sorted(f["estimators"], key=lambda e: -f["estimators"][e]["kendall_tau"])
    rows = []
    for e in ests:
        x = f["estimators"][e]
        rows.append([e, f"{x['kendall_tau']:.3f}", f"{x['kendall_ci'][0]:.2f} to {x['kendall_ci'][1]:.2f}",
                     f"{x['spearman']:.3f}", f"{x['spearman_ci'][0]:.2f} to {x['spearman_ci'][1]:.2f}",
                     f"{x['top_overlap']:.0%} of {x['top_n']}", _f(x["seconds_per_candidate"], 2),
                     f"{x['cost_share_of_reference']:.3f}"])
    rows.append(["reference", "1", "-", "1", "-", "-", _f(f["reference_seconds_per_candidate"], 1), "1"])
    ref = [a["reference"] for a in f["archs"]]
    d = f["data"]
    return f"""Does a cheap accuracy estimate rank architectures like real training does? {f['k']} architectures of
`{f['space']}` (seeded; the smallest and largest by MACs, the rest spread over the MACs range), each
trained as the **reference**: {f['reference']['train_samples']:,} CIFAR-10 training images for
{f['reference']['epochs']} epochs with the `train` recipe, validated on {d['val']:,} images carved from the
training split (the JPEG copy of CIFAR-10's training images; pixels differ slightly from the original
release, so accuracies are close to, not identical with, published CIFAR-10 figures). Reference
accuracies range {_pct(min(ref))} - {_pct(max(ref))}. The cheap estimators score the same networks:
`train_<e>ep` trains {f['cheap_train_samples']:,} images for e epochs with the same recipe; the
training-free scores look at one minibatch at initialisation; params and MACs are the trivial
baselines. Kendall's tau and Spearman's rho against the reference, with 95% bootstrap intervals over
the architectures; top-10% overlap; cost as median seconds per candidate (on this machine, all in one
run) and as a share of the reference's.

{table(["estimator", "Kendall tau", "95% CI", "Spearman", "95% CI", "top-10%", "s / candidate", "cost / reference"],
       rows)}

Reproduce the study itself (it resumes from its records): `{f.get('study_command', '')}`"""


def _reference_noise(rec: Rec) -> str:
    f = rec["figures"]
    seeds, others = f["seeds"], f["seeds"][1:]
    pairs = table(["references", "Kendall tau", "95% CI", "Spearman", "median difference", "largest"],
                  [[f"seed {p['seeds'][0]} vs seed {p['seeds'][1]}", f"**{p['kendall_tau']:.3f}**",
                    f"{p['kendall_ci'][0]:.2f} to {p['kendall_ci'][1]:.2f}", _f(p["spearman"], 3),
                    f"{p['abs_diff_points']['median']:.1f} points", f"{p['abs_diff_points']['max']:.1f} points"]
                   for p in f["pairs"]])
    rest = ""
    if f.get("one_vs_rest"):
        rest = "\n\nEach reference against the mean of the others (an estimator far less noisy than one training, " \
               "and costing several): " + "; ".join(
                   f"seed {s} **{v['kendall_tau']:.3f}** ({v['kendall_ci'][0]:.2f} to {v['kendall_ci'][1]:.2f})"
                   for s, v in f["one_vs_rest"].items()) + "."
    ceiling = "" if f.get("noise_ceiling") is None else (
        f"\n\nNoise ceiling: an error-free estimator is expected to reach tau **{f['noise_ceiling']:.3f}** against one "
        f"reference, given that the references agree at {f['mean_tau_between']:.3f} on average "
        "(`nas.studies.stats.noise_ceiling`: each run the truth plus independent Gaussian noise; a model, not a "
        "measurement).")
    rows = [[f"**{e}**" if e == "supernet" else e, *(_f(v[f"vs_seed{s}"]["kendall_tau"], 3) for s in seeds),
             _f(v["vs_mean"]["kendall_tau"], 3),
             f"{v['vs_mean']['kendall_ci'][0]:.2f} to {v['vs_mean']['kendall_ci'][1]:.2f}"]
            for e, v in sorted(f["estimators"].items(), key=lambda kv: -kv[1]["vs_mean"]["kendall_tau"])]
    return f"""The proxy-fidelity study's reference ({f['reference']['train_samples']:,} images x
{f['reference']['epochs']} epochs per architecture, seed 0) trained again for its {f['k']} architectures with
seed{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} (another initialisation, other training
images, another order):

{pairs}{rest}{ceiling}

Each estimator's tau against each reference and against their mean:

{table(["estimator", *(f"tau vs seed {s}" for s in seeds), "tau vs mean", "95% CI (mean)"], rows)}"""


def _supernet(rec: Rec) -> str:
    f = rec["figures"]
    sn, fid, cost, search = f["supernet"], f["fidelity"], f["cost"], f["search"]
    plan = sn["plan"]
    chosen = (f"{sn['epochs']} epoch{'s' if sn['epochs'] != 1 else ''}, chosen from {plan['epochs_from']}"
              + (f" ({plan['seconds_per_step']:.2f} s per step)" if "seconds_per_step" in plan else ""))
    hist = table(["epoch", "loss (largest)", "loss (others)", "largest subnet", "smallest subnet", "s"],
                 [[str(int(h["epoch"])), _f(h["loss_largest"], 3), _f(h["loss_others"], 3),
                   _pct(h.get("accuracy_largest")), _pct(h.get("accuracy_smallest")), _f(h["seconds"], 0)]
                  for h in sn["history"]])
    ests = sorted(fid["estimators"], key=lambda e: -fid["estimators"][e]["kendall_tau"])
    rows = []
    for e in ests:
        x = fid["estimators"][e]
        name = f"**{e}**" if e == "supernet" else e
        rows.append([name, f"{x['kendall_tau']:.3f}", f"{x['kendall_ci'][0]:.2f} to {x['kendall_ci'][1]:.2f}",
                     f"{x['spearman']:.3f}", f"{x['top_overlap']:.0%} of {x['top_n']}",
                     _f(x["seconds_per_candidate"], 2)])
    s = cost["seconds"]
    paths = []
    for label, p in search["paths"].items():
        paths.append([label, p["search"]["arch_id"], _f(p["final"]["latency_ms"], 3),
                      _pct(p["search"]["proxy_accuracy"]), _pct(p["final"]["init_accuracy"]),
                      _pct(p["final"]["accuracy"]), _f(p["supernet_seconds"] / 60, 1),
                      _f(p["search"]["search_seconds"] / 60, 1), _f(p["final"]["train_seconds"] / 60, 1),
                      _f(p["total_seconds"] / 60, 1)])
    goal = "meets" if cost["meets_goal"] else "misses"
    return f"""A supernet of `mobile_cifar` (`python -m nas.supernet`: each step the largest network of each
block type, the smallest and two random subnets, in-place distillation, the `train` recipe) trained on
{sn['train_images']:,} CIFAR-10 training images for {chosen}, in **{sn['train_seconds'] / 60:.1f} minutes**
(budget {plan['budget_minutes']} minutes). Its validation images are those of the proxy-fidelity study and
were never trained on.

{hist}

**Fidelity.** The proxy-fidelity study's {fid['k']} architectures and reference accuracies (`{fid.get('source', '')}`),
with the supernet's estimate (each subnet extracted, BatchNorm recalibrated on {cost['bn_batches']} x
{cost['batch_size']} training images, validated) next to the study's other estimators: Kendall's tau with its
95% bootstrap interval, Spearman's rho, top-10% overlap, seconds per candidate (the supernet's training is not
in that figure: it is paid once, above).

{table(["estimator", "Kendall tau", "95% CI", "Spearman", "top-10%", "s / candidate"], rows)}

**Cost per candidate** on one core (one torch thread): median **{s['median']:.2f} s** (quartiles
{s['q25']:.2f} - {s['q75']:.2f} s, max {s['max']:.2f} s) for extraction, recalibration and validation on
{cost['val_images']:,} images; it {goal} the 2 s goal. A 1,000-candidate search then costs about
{s['median'] * 1000 / 60:.0f} core-minutes of accuracy estimates besides the latency measurements.

**Search.** LatNAS at {search['target_ms']:g} ms (MobileNetV2, 32x32 layout, width 0.5, measured here), once
with `accuracy=supernet` and once with brief training ({search['brief_training']['data.max_train_samples']:,}
images x {search['brief_training']['train.epochs']} epochs per candidate), {search['candidates_per_search']}
candidates each; each best network then trained {search['final_epochs']} epochs on
{search['final_train_images']:,} images by `nas.export` (from the supernet's weights, `init=supernet`, or
from scratch). Compute is wall time on this machine's two cores; a path through the supernet search carries
the supernet's training.

{table(["path", "best", "latency ms", "search's estimate", "after recalibration", "final accuracy",
        "supernet min", "search min", "training min", "total min"], paths)}

Reproduce the supernet alone: `{f.get('supernet_command', '')}`"""


def _deployment(rec: Rec) -> str:
    f = rec["figures"]
    s = f["settings"]

    def label(n: dict[str, Any]) -> str:
        return n["name"] + (f" x{n['multiplier']:g}" if n.get("multiplier") else "")

    rows = []
    for n in f["networks"]:
        for v in n["variants"]:
            p50 = _f(v["p50_ms"], 3) + (" (unstable)" if v.get("stable") is False else "")
            rows.append([label(n), v["variant"], v["precision"], p50, _f(v["p99_ms"], 3),
                         f"{v['macs'] / 1e6:.1f}", f"{v['size_bytes'] / 1e3:.0f}", _pct(v["accuracy"]),
                         _pct(v["agreement"]), _f(v["max_abs_diff"], 3), v["status"]])
    int8 = []
    for n in f["networks"]:
        for source, v in n["int8"].items():
            if v:
                int8.append([label(n), source, f"{v['speedup']:.2f}x", f"{v['accuracy_loss_points']:+.2f}",
                             "yes" if v["meets_speedup"] and v["meets_accuracy"] else "no"])
    fr = f["front"]
    front = [[x["variant"], _f(x["p50_ms"], 3), _pct(x["accuracy"]), "yes" if x["between"] else "no",
              "yes" if x["dominated"] else "no", "yes" if x["on_front"] else "no"] for x in fr["pruned"]]
    small = fr.get("next_smaller")
    placed = (table(["variant", "p50", "accuracy", "between", "dominated", "on the front"], front) if front else
              "No pruned variant of the searched network to place: " + (
                  "none was timed." if small else "neither the search's front nor a second search at a lower "
                                                  "target found a smaller network."))
    ratios = " and ".join(f"{r:.0%}" for r in s["ratios"])
    second = f["search"].get("second_search")
    smaller_from = (f"the best of a second search at {_f(second['target_ms'], 3)} ms, since the first search's best "
                    "was the fastest on its front" if second else "the candidate before it on its Pareto front")
    anchors = (f"searched {_f(fr['searched']['p50_ms'], 3)} ms at {_pct(fr['searched']['accuracy'])}; next smaller "
               + (f"{_f(small['p50_ms'], 3)} ms at {_pct(small['accuracy'])}" if small else "none found"))
    return f"""What the steps after the search give on this CPU. LatNAS searched `mobile_cifar` on CIFAR-10
({f['search']['candidates']} candidates, target {_f(f['target_ms'], 3)} ms: MobileNetV2 x0.5 in its 32x32 layout).
Its best network, the next smaller one ({smaller_from}), and MobileNetV2 (32x32 layout) width-scaled to the
searched network's latency were exported and trained ({s['train_samples']:,} training images, {s['epochs']}
epoch(s)), then optimised with `python -m nas.optimize`: INT8 (ONNX Runtime static QDQ quantisation, per-channel
weights, calibrated on {s['calibration']} training images) and, for the searched network and MobileNetV2,
pruning {ratios} of the MACs away ({s['steps']} progressive step(s), {s['finetune_epochs']} fine-tuning epoch(s)
each, with distillation), each pruned network in INT8 too.

Accuracy, and top-1 agreement with the network's unpruned FP32 model, on {s['val']:,} validation images carved
from the training split. Latency p50/p99 (ms): {f['latency']}; every model timed alternately in one process, each
keeping its best of {s['rounds']} rounds. The check: a quantised variant agrees with the FP32 network it was made
from on at least {s['min_agreement']:g} of the images, a pruned one with the network it was pruned from on at
least {s['min_agreement_pruned']:g}; a variant that fails is not kept, so it has no latency here. A p50 marked
unstable is from a measurement whose spread stayed above the protocol's threshold or that did not get the
CPU it asked for (a busy machine).

{table(["network", "variant", "precision", "p50", "p99", "MMACs", "size kB", "accuracy", "agreement",
        "max diff", "check"], rows)}

**INT8 against FP32** (goal: >= {f['goals']['int8_speedup']:g}x faster, <= {f['goals']['int8_max_loss_points']:g}
point lost):

{table(["network", "INT8 of", "speed-up", "accuracy lost (points)", "goal met"], int8)}

**Pruning on the front** ({anchors}): a pruned variant of the searched network meets the goal when it is faster
than the searched network, slower than the next smaller one and dominated by neither:
**{"met" if fr["meets_goal"] else "not met"}**.

{placed}"""


RENDERERS: dict[str, Callable[[Rec], str]] = {
    "latency": _latency, "spread": _spread, "tail": _tail, "predictor": _predictor, "transfer": _transfer,
    "transfer_many": _transfer_many,
    "agent": _agent,
    "search": _search, "sampler": _sampler,
    "screening": _screening, "scale": _scale, "references": _references, "contention": _contention,
    "reliability": _reliability, "fidelity": _fidelity, "supernet": _supernet, "reference_noise": _reference_noise,
    "deployment": _deployment, "cifar10_deploy": lambda rec: _cifar10_deploy(rec),
}


def _cifar10_deploy(rec: Rec) -> str:
    from benchmarks import cifar10_deploy  # it imports this module: its renderer is looked up when used

    return cifar10_deploy.render(rec)

INTRO = """# Benchmarks

Generated by `python scripts/bench.py --render` from the JSON records under `benchmarks/records/` (full
runs) and `benchmarks/records/quick/` (quick runs, used where no full record exists), with the notes
in `benchmarks/notes/`; do not edit by hand. Each
section says when and on what it was measured and the command that reproduces it. The machine is a
shared two-core CPU host with no GPU. Some runs had it to themselves, others shared it with other
work; the notes and load averages say which. Ratios were measured side by side in one run, and
spreads are reported.

    python scripts/bench.py --quick     # the quick set, small (about 9.5 minutes on 2 cores; --list sums it)
    python scripts/bench.py --list      # the benchmarks and their expected durations
    python scripts/bench.py sampler references   # named benchmarks at full size (says how long first)
    python scripts/bench.py --render    # this page again from the records

The CIFAR-10 benchmarks need the training images (`--cifar10 DIR/cifar10-train-jpeg.tar.gz`, or
`$LATNAS_CIFAR10_JPEG`) and run in `--quick` only when named.
"""


def render(records: dict[str, Rec], notes: dict[str, str] | None = None) -> str:
    """The whole ``BENCHMARKS.md`` text for these records.

    ``notes`` (benchmark name -> Markdown) are hand-written observations about a record's
    figures, kept in ``benchmarks/notes/<name>.md`` and placed under its generated tables.
    """
    notes = notes or {}
    parts = [INTRO]
    # A record named <benchmark>_<variant> (e.g. predictor_seed1) follows its benchmark's section.
    def split(name: str) -> tuple[str, str]:  # a renderer's own name may hold "_"
        base, _, variant = (name, "", "") if name in RENDERERS else name.partition("_")
        return base, variant

    def key(name: str) -> tuple[int, str]:
        base = split(name)[0]
        return (ORDER.index(base) if base in ORDER else len(ORDER), name)

    for name in sorted(records, key=key):
        rec = records[name]
        base, variant = split(name)
        body = RENDERERS.get(base, _generic)
        try:
            text = body(rec)
        except (KeyError, TypeError, StopIteration):
            text = _generic(rec)
        title = TITLES.get(base, base.capitalize()) + (f" ({variant})" if variant else "")
        if notes.get(name):
            text += f"\n\n**Notes** (written by hand about these figures):\n\n{notes[name].strip()}"
        parts.append(f"## {title}\n\n{text}\n\n{meta(rec)}\n")
    return "\n".join(parts)


def write(records_dir: Path, output: Path) -> Path:
    """Render the records in ``records_dir`` (with the notes in ``notes/`` beside it) to ``output``."""
    notes = {p.stem: p.read_text() for p in sorted((records_dir.parent / "notes").glob("*.md"))}
    output.write_text(render(load_records(records_dir), notes))
    return output
