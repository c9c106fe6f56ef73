"""``report.md`` of an export: the human-readable form of ``report.json`` (see :mod:`nas.deploy.export`)."""

from __future__ import annotations

import math
from typing import Any

CHANCE_FACTOR = 1.5
"""Validation accuracy below this multiple of chance (1 / classes) after training is warned about."""


def training_warning(training: dict[str, Any] | None) -> str | None:
    """A warning when the export's training ended near chance accuracy (None: fine or not trained)."""
    if not training:
        return None
    classes = len(training.get("preprocessing", {}).get("classes") or []) or 0
    if classes < 2:
        return None
    chance = 1 / classes
    if training["accuracy"] >= CHANCE_FACTOR * chance:
        return None
    return (f"the exported network is at chance accuracy: {training['accuracy']:.3f} on the validation split after "
            f"{training['epochs']} epoch(s), where guessing gives {chance:.3f} ({classes} classes); train longer "
            "(train.epochs=...) or on more images (train_samples=null: all of them) before deploying it")


def dataset_label(dataset: dict[str, Any]) -> str:
    """What the training data is called in a report (its ``label``; reports of older exports: its ``name``)."""
    return str(dataset.get("label") or dataset["name"])


def fmt_num(x: Any) -> str:
    """A number with 3 decimals, or ``-`` when missing or not finite."""
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{float(x):.3f}"


def _where(figures: dict[str, Any]) -> str:
    """Which training the search's accuracy comes from: its rung in a multi-fidelity search."""
    if figures.get("rung_train_images") is None:
        return "proxy training"
    if figures["rung_train_images"] == 0:
        return f"rung {int(figures['rung'])}: the supernet's estimate"
    return (f"rung {int(figures['rung'])}: {int(figures['rung_train_images'])} images x "
            f"{int(figures['rung_epochs'])} epochs")


def render_report(r: dict[str, Any]) -> str:
    """The human-readable report of an export (``report.md``)."""
    lat = r["latency"]
    sm = r["search"]["metrics"]
    cand = r["candidate"]
    lines = [
        f"# Export of {r['arch_id']}", "",
        f"`{r['arch']}`", "",
        f"- candidate: {cand['origin']}" + (f", run `{cand['run_id']}`" if cand["run_id"] else "")
        + (f", search `{cand['search']}`" if cand["search"] else ""),
        f"- space: {cand['space'] or '-'}",
        f"- parameters: {r['params']:,}; MACs: {r['macs']:,} at {'x'.join(map(str, lat['input_shape']))}",
        f"- weights: {r['weights']}",
        "",
        "## Accuracy", "",
        "| figure | value |", "|---|---|",
        f"| search accuracy ({_where(sm)}) | {fmt_num(sm.get('accuracy'))} |",
        f"| search reward | {fmt_num(sm.get('reward'))} |",
        f"| search precision (latency and the reward's accuracy) | {r['search'].get('precision') or '-'} |",
    ]
    if "accuracy_fp32" in sm:
        lines.append(f"| search accuracy in fp32 (logged, not rewarded) | {fmt_num(sm['accuracy_fp32'])} |")
    if r["training"]:
        t = r["training"]
        lines.append(f"| final accuracy after {t['epochs']} epochs on {dataset_label(t['dataset'])} "
                     f"| {t['accuracy']:.4f} |")
        lines.append(f"| final validation loss | {t['val_loss']:.4f} |")
        warning = training_warning(t)
        if warning:
            lines += ["", f"**Warning**: {warning}."]
    lines += [
        "", "## Latency (ms)", "",
        f"Re-measured now with `{lat['backend']}` on {lat['environment'].get('device_name', '?')} "
        f"(p50 / p90 / p99 of {lat['fused']['runs']} runs; the unfused and fused networks timed alternately, "
        f"best of {lat['rounds']} rounds each), next to the figure the search used.", "",
        "| | p50 | p90 | p99 | source | CPU s per wall s |", "|---|---|---|---|---|---|",
        f"| search | {fmt_num(sm.get('latency_p50'))} | {fmt_num(sm.get('latency_p90'))} "
        f"| {fmt_num(sm.get('latency_p99'))} | {r['search']['latency_source'] or '-'} | - |",
    ]
    if "latency_p50_fp32" in sm:
        lines.append(f"| search, fp32 (logged, not rewarded) | {fmt_num(sm['latency_p50_fp32'])} "
                     f"| {fmt_num(sm.get('latency_p90_fp32'))} | {fmt_num(sm.get('latency_p99_fp32'))} "
                     "| measured | - |")
    for stage, label in (("unfused", "export, unfused"), ("fused", "export, Conv+BN fused")):
        x = lat[stage]
        cpu = f"{x['cpu_per_wall']:.2f}" if x.get("cpu_per_wall") is not None else "-"
        lines.append(
            f"| {label} | {fmt_num(x['p50_ms'])} | {fmt_num(x['p90_ms'])} | {fmt_num(x['p99_ms'])} | measured | {cpu} |"
        )
    lines += ["", "CPU seconds per wall second while timing near 1.0 (per thread) mean the network had its core "
              "to itself; lower values mean other work competed and the figures are pessimistic."]
    if lat.get("anchor"):
        a = lat["anchor"]
        lines += ["", f"Beside the anchor network `{a['network']}`, timed right after the {a['paired_with']} network "
                  f"in each round: x_anchor {a['x_anchor']:.3f} (the median over the rounds of its p50 over the "
                  f"anchor's; rounds {', '.join(f'{x:.3f}' for x in a['round_ratios'])}), the anchor "
                  f"{fmt_num(a['p50_ms'])} ms p50."
                  + (f" In the search: x_anchor {fmt_num(sm['x_anchor'])}, the anchor "
                     f"{fmt_num(sm.get('anchor_latency_ms'))} ms." if "x_anchor" in sm else "")]
    target = r["search"].get("tags", {}).get("target_anchor")
    if "target_x" in sm and target:
        lines += ["", f"Latency target of the search: x{sm['target_x']:g} `{target}` (no slower than "
                  f"{sm['target_x']:g} times that network's latency)."]
    elif "target_ms" in sm:
        lines += ["", f"Latency target of the search: {fmt_num(sm['target_ms'])} ms."]
    fu = r["fusion"]
    lines += [
        "", "## Conv+BN fusion", "",
        f"{fu['batchnorms_before']} BatchNorm layers folded into their convolutions "
        f"({fu['batchnorms_after']} left). p50 speed-up with `{lat['backend']}`: {lat['speedup_p50']:.2f}x.",
    ]
    if "torch_eager" in lat:
        te = lat["torch_eager"]
        lines.append(
            f"Eager PyTorch (which does not fuse by itself): {fmt_num(te['unfused']['p50_ms'])} -> "
            f"{fmt_num(te['fused']['p50_ms'])} ms p50 ({te['speedup_p50']:.2f}x)."
        )
    if fu["onnx_batchnorm_nodes_unfused"] == 0:
        lines.append(
            "The ONNX exporter already folds BatchNorm in eval mode (0 BatchNormalization nodes in the unfused "
            "network's export), as ONNX Runtime and TensorRT would at load time, so graph runtimes time the same "
            "graph before and after: their difference is measurement noise."
        )
    lines += ["", "## Checks", "",
              "Each model's logits against the unfused PyTorch network's on the same random inputs: every logit "
              "within atol + rtol x |logit|, and the largest difference within rtol x the largest logit.", "",
              "| check | max abs diff | largest logit | diff / largest | tolerance | result |",
              "|---|---|---|---|---|---|"]
    for c in r["checks"]:
        lines.append(
            f"| {c['name']} | {c['max_abs_diff']:.3g} | {c['output_scale']:.3g} | {c['scaled_diff']:.3g} "
            f"| atol {c['atol']:g}, rtol {c['rtol']:g} | {'passed' if c['passed'] else 'FAILED'} |"
        )
    o = r["onnx"]
    lines += ["", f"`model.onnx`: opset {o['opset']}, {o['nodes']} nodes, onnx.checker {o['checker']}, "
              f"run on {', '.join(o['providers'])}."]
    e = r["engine"]
    lines += ["", "## TensorRT", ""]
    if e["built"]:
        lines.append(f"`model.engine`: {e['precision']}, TensorRT {e['tensorrt']}, {e['gpu']} ({e['note']}).")
        if e.get("calibration"):
            lines.append(f"INT8 calibration: {e['calibration']}.")
    else:
        lines += [f"No engine built: {e['reason']}", "", "Build one on the target machine with:", "",
                  f"    {e['how_to_build']}"]
    lines += ["", "## OpenVINO and LiteRT", ""]
    labels = {"openvino": "OpenVINO IR", "litert": "LiteRT model"}
    if not r["runtimes"]:
        lines.append("Neither written: not asked for (`runtimes=[]`).")
    for name, rt in r["runtimes"].items():
        label = labels[name]
        if rt["written"]:
            lines.append(f"- {' + '.join(f'`{f}`' for f in rt['files'])}: {label}, converted from "
                         f"{rt['converted_from']}, checked above (`{rt['check']}`).")
        else:
            lines.append(f"- No {label} written: {rt['reason']}")
    env = lat["environment"]
    lines += ["", "## Environment", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(env.items())]
    lines += ["", "## Loading the network", "",
              "`model.pt` holds the weights (a `state_dict`, BatchNorm not fused); in Python, from this folder:", "",
              "```python",
              "from nas.export import load_exported",
              "net = load_exported(\".\")  # the network of arch.json with these weights, eval mode",
              "```", "",
              "`model.ts` (`torch.jit.load`) and `model.onnx` (`onnxruntime.InferenceSession`) need no LatNAS code."]
    lines += ["", "## Files", ""] + [f"- `{f}`" for f in r["files"]]
    return "\n".join(lines) + "\n"
