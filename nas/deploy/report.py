"""The per-candidate table of ``python -m nas.optimize`` and its regression check.

One row per variant, as a practitioner draws it: variant, precision, latency p50/p99 (measured
with the protocol on the same backend, best of the alternating rounds), speed-up over FP32, size
on disk, accuracy on the validation split, top-1 agreement with the candidate's FP32 network, the
largest logit difference from it, and the check.

The check (:func:`check_variant`): a quantised or half-precision variant must agree with the FP32
network it was made from on at least ``check.min_agreement`` of the validation images; a pruned
variant (fine-tuned, so a different function by design) with the candidate's FP32 network on at
least ``check.min_agreement_pruned``. A variant below its bound is ``FAILED``: its files are
removed, its row says why, and the command fails after writing the report.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

PASSED, FAILED, SKIPPED = "passed", "FAILED", "skipped"


@dataclass
class VariantRow:
    """One row of the table (and of ``report.json``'s ``variants``).

    Attributes:
        variant: its name (``fp32``, ``int8``, ``pruned-0.3``, ``pruned-0.3-int8``, ``tensorrt-fp16``).
        precision: what it computes in.
        source: the FP32 network it was made from (``fp32`` or ``pruned-<ratio>``).
        backend: the runtime that timed it.
        status: ``passed``, ``FAILED`` or ``skipped``.
        reason: why it failed or was skipped; what was checked otherwise.
        arch: its architecture string.
        files: its files, relative to the export folder (none once failed).
        size_bytes: their size on disk.
        macs: its MACs at the deployment shape.
        latency: p50/p90/p99 (ms), stability, each round's p50, CPU share.
        accuracy: top-1 accuracy on the validation images.
        agreement: top-1 agreement with the candidate's FP32 network.
        max_abs_diff: the largest logit difference from it.
        source_agreement: top-1 agreement with the FP32 network it was made from.
        source_max_abs_diff: the largest logit difference from that network.
        notes: how it was made.
    """

    variant: str
    precision: str
    source: str
    backend: str
    status: str = PASSED
    reason: str = ""
    arch: str = ""
    files: list[str] = field(default_factory=list)
    size_bytes: int = 0
    macs: int = 0
    latency: dict[str, Any] | None = None
    accuracy: float = math.nan
    agreement: float = math.nan
    max_abs_diff: float = math.nan
    source_agreement: float = math.nan
    source_max_abs_diff: float = math.nan
    notes: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable record (non-finite numbers as None)."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def check_variant(row: VariantRow, min_agreement: float, min_agreement_pruned: float) -> None:
    """Set ``row``'s status by its regression check (see the module); a skipped row is left as it is."""
    if row.status == SKIPPED:
        return
    if row.variant == row.source and row.variant != "fp32":  # a pruned network, fine-tuned: a new function
        value, bound, against = row.agreement, min_agreement_pruned, "fp32"
    else:  # a runtime's model of an FP32 network, at its precision (the fp32 row: ONNX Runtime against PyTorch)
        value, bound, against = row.source_agreement, min_agreement, row.source
    ok = math.isfinite(value) and value >= bound
    row.reason = (f"top-1 agreement {value:.4f} with {against} {'>=' if ok else '<'} {bound:g}"
                  if math.isfinite(value) else f"outputs are not finite (agreement with {against} undefined)")
    row.status = PASSED if ok else FAILED


def _ms(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.3f}"


def _size(n: int) -> str:
    return "-" if not n else (f"{n / 1e6:.2f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB")


def _pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:.2f}"


def table(rows: list[VariantRow]) -> list[str]:
    """The markdown table of ``rows`` (speed-up against the ``fp32`` row timed by the same backend)."""
    fp32 = {r.backend: r.latency["p50_ms"] for r in rows if r.variant == "fp32" and r.latency}
    lines = ["| variant | precision | backend | p50 ms | p99 ms | speed-up | size | accuracy % | agreement % "
             "| max abs diff | check |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p50 = r.latency["p50_ms"] if r.latency else None
        p99 = r.latency["p99_ms"] if r.latency else None
        base = fp32.get(r.backend)
        speed = f"{base / p50:.2f}x" if base and p50 else "-"
        diff = "-" if not math.isfinite(r.max_abs_diff) else f"{r.max_abs_diff:.3g}"
        check = {PASSED: "passed", SKIPPED: "not made (below)"}.get(r.status, f"{r.status}: {r.reason}")
        lines.append(f"| {r.variant} | {r.precision} | {r.backend} | {_ms(p50)} | {_ms(p99)} | {speed} "
                     f"| {_size(r.size_bytes)} | {_pct(r.accuracy)} | {_pct(r.agreement)} | {diff} | {check} |")
    return lines


def render(report: dict[str, Any], rows: list[VariantRow]) -> str:
    """``report.md`` of an optimisation."""
    lat = report["latency"]
    lines = [
        f"# Deployment variants of {report['arch_id']}", "",
        f"`{report['arch']}`", "",
        f"- latency: `{lat['backend']}` on {lat['device_name']}, input {'x'.join(map(str, lat['input_shape']))}, "
        f"p50/p99 of the protocol, best of {lat['rounds']} alternating rounds",
        f"- validation: {report['validation']['images']} images of {report['validation']['dataset']} "
        f"(FP32 network: {_pct(report['validation']['fp32_accuracy'])} %)",
        f"- calibration: {report['calibration']}",
        f"- checks: quantised and half-precision variants agree with their FP32 network on >= "
        f"{report['checks']['min_agreement']:g} of the images; pruned variants with the candidate's on >= "
        f"{report['checks']['min_agreement_pruned']:g}",
        "", *table(rows), "",
    ]
    for r in rows:
        if r.status == SKIPPED:
            lines.append(f"- {r.variant}: not made: {r.reason}")
    pruning = report.get("pruning") or {}
    for p in pruning.get("results", []):
        lines += ["", f"## Pruned to {p['ratio']:g} of the MACs removed ({p['removed_share']:.1%} reached)", "",
                  f"`{p['arch']}` ({'in' if p['in_space'] else 'outside'} the search space"
                  f"{' ' + repr(p['space']) if p['space'] else ''}; measure or predict it by this string)", "",
                  "| step | MACs removed | architecture | accuracy after BN recalibration (sensitivity images) "
                  "| after fine-tuning (validation) |", "|---|---|---|---|---|"]
        for s in p["steps"]:
            tuned = _pct(s["finetune"][-1]["accuracy"]) if s["finetune"] else "-"
            lines.append(f"| {s['step']} | {s['target_share']:.0%} | `{s['arch']}` "
                         f"| {_pct(s['accuracy_after_recalibration'])} | {tuned} |")
    if pruning.get("sensitivity"):
        lines += ["", "## Sensitivity (one unit pruned alone, no retraining)", "",
                  f"Accuracy of the unpruned network on the sensitivity images: {_pct(pruning['base_accuracy'])} %.",
                  "", "| unit | share removed | kept | MACs | accuracy % | drop (points) |",
                  "|---|---|---|---|---|---|"]
        for s in pruning["sensitivity"]:
            lines.append(f"| {s['unit']} | {s['ratio']:g} | {s['value']} | {s['macs']:,} | {_pct(s['accuracy'])} "
                         f"| {100 * s['drop']:.2f} |")
    env = lat.get("environment", {})
    if env:
        lines += ["", "## Environment", "", "| | |", "|---|---|", *[f"| {k} | {v} |" for k, v in sorted(env.items())]]
    return "\n".join(lines) + "\n"
