"""Which blocks the time goes to.

Two sources, one result type (:class:`Breakdown`):

* ONNX Runtime's profiler (:func:`parse_ort_profile`): every executed node's kernel time. The
  TorchScript exporter names nodes after their module path (``/blocks/blocks.3/body/...``), so
  each node maps to ``stem``, ``blocks.<i>``, ``head``, ``pool`` or ``classifier``. Nodes ONNX
  Runtime inserts itself (layout reorders such as ``ReorderOutput_token_12``) and top-level ops
  (``/Flatten``) have no module path; they are charged to the block of the node executed just
  before them, which is the block whose output they convert.
* PyTorch forward hooks on the network's top-level parts (:func:`torch_block_times`), with a
  device synchronise around each part on CUDA.

Profiling adds overhead to every node, so the per-block milliseconds add up to somewhat more
than the measured latency; the shares are what to read.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from latency_predictor.errors import MeasurementError

_TOP = ("stem", "head", "pool", "dropout", "classifier")
_BLOCK_RE = re.compile(r"^/blocks/(blocks\.\d+)(?:/|$)")
_TOP_RE = re.compile(r"^/(" + "|".join(_TOP) + r")(?:/|$)")
OTHER = "other"


@dataclass(frozen=True)
class BlockTime:
    """Time of one block per inference.

    Attributes:
        block: ``stem``, ``blocks.<i>``, ``head``, ``pool``, ``dropout``, ``classifier`` or ``other``.
        ms: milliseconds per inference.
        share: fraction of the total (0-1).
    """

    block: str
    ms: float
    share: float


@dataclass(frozen=True)
class Breakdown:
    """Per-block times of one network, in execution order.

    Attributes:
        arch: canonical architecture string.
        source: ``onnxruntime-profiler`` or ``torch-hooks``.
        runs: inferences profiled.
        total_ms: sum of the block times per inference.
        blocks: one entry per block, in network order.
    """

    arch: str
    source: str
    runs: int
    total_ms: float
    blocks: tuple[BlockTime, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable record."""
        return {
            "arch": self.arch, "source": self.source, "runs": self.runs, "total_ms": self.total_ms,
            "blocks": [{"block": b.block, "ms": b.ms, "share": b.share} for b in self.blocks],
        }

    def format_table(self) -> str:
        """A readable table: block, ms, share and a bar."""
        lines = [f"{'block':<12} {'ms':>9} {'share':>7}"]
        for b in self.blocks:
            lines.append(f"{b.block:<12} {b.ms:>9.4f} {b.share:>6.1%} {'#' * round(b.share * 40)}")
        lines.append(f"{'total':<12} {self.total_ms:>9.4f} ({self.source}, {self.runs} runs)")
        return "\n".join(lines)


def block_of_node(node_name: str) -> str | None:
    """The block an exported ONNX node belongs to, from its module path; None when it has none."""
    m = _BLOCK_RE.match(node_name)
    if m:
        return m.group(1)
    m = _TOP_RE.match(node_name)
    return m.group(1) if m else None


def _order_key(block: str) -> tuple[int, int]:
    order = {"stem": 0, "blocks": 1, "head": 2, "pool": 3, "dropout": 4, "classifier": 5, OTHER: 6}
    if block.startswith("blocks."):
        return order["blocks"], int(block.split(".")[1])
    return order.get(block, 6), 0


def make_breakdown(arch: str, source: str, runs: int, totals_ms: Mapping[str, float]) -> Breakdown:
    """Turn accumulated per-block milliseconds over ``runs`` inferences into a :class:`Breakdown`.

    Raises:
        MeasurementError: no time was recorded.
    """
    total = sum(totals_ms.values())
    if runs < 1 or total <= 0:
        raise MeasurementError(f"the {source} recorded no time for {arch}")
    blocks = tuple(
        BlockTime(b, totals_ms[b] / runs, totals_ms[b] / total) for b in sorted(totals_ms, key=_order_key)
    )
    return Breakdown(arch, source, runs, total / runs, blocks)


def node_times_by_block(events: Iterable[Mapping[str, Any]], skip_runs: int = 0) -> dict[str, float]:
    """Sum ONNX Runtime profiler node kernel times per block, in ms.

    Args:
        events: the profile's events (``cat == "Node"`` with names ending ``_kernel_time`` count).
        skip_runs: leave out the nodes of the first runs (the profile's first ``model_run``
            events), i.e. the warm-up.
    """
    evs = list(events)
    runs = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
                  for e in evs if e.get("cat") == "Session" and e.get("name") == "model_run")
    kept = runs[skip_runs:]
    nodes = sorted(
        (e for e in evs if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")),
        key=lambda e: float(e["ts"]),
    )
    totals: dict[str, float] = {}
    previous = OTHER
    for ev in nodes:
        name, ts = str(ev["name"]), float(ev["ts"])
        block = block_of_node(name) or previous
        previous = block
        if skip_runs and not any(a <= ts <= b for a, b in kept):
            continue
        totals[block] = totals.get(block, 0.0) + float(ev.get("dur", 0)) / 1e3
    return totals


def parse_ort_profile(path: str | Path, arch: str, runs: int, skip_runs: int = 0) -> Breakdown:
    """Read an ONNX Runtime profile (``session.end_profiling()``): ``skip_runs`` warm-up runs, then
    ``runs`` profiled inferences.

    Raises:
        MeasurementError: the file is unreadable or holds no node times.
    """
    try:
        events = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise MeasurementError(f"cannot read the ONNX Runtime profile {str(path)!r}: {err}") from None
    return make_breakdown(arch, "onnxruntime-profiler", runs, node_times_by_block(events, skip_runs))


def _top_level_parts(net: nn.Module) -> list[tuple[str, nn.Module]]:
    parts: list[tuple[str, nn.Module]] = []
    for name, child in net.named_children():
        if name == "blocks":
            parts += [(f"blocks.{i}", b) for i, b in enumerate(child.children())]
        elif not isinstance(child, nn.Identity | nn.Dropout):  # no work at inference
            parts.append((name, child))
    return parts


def torch_block_times(
    net: nn.Module, run_once: Callable[[], object], runs: int, sync: Callable[[], object] | None = None
) -> dict[str, float]:
    """Time each top-level part of ``net`` with forward hooks over ``runs`` calls of ``run_once``.

    Returns:
        Milliseconds per part, summed over the runs. Work outside the parts (the flatten between
        pooling and classifier) is not counted.
    """
    totals: dict[str, float] = {}
    starts: dict[str, float] = {}
    handles = []

    def now() -> float:
        if sync is not None:
            sync()
        return time.perf_counter()

    for name, module in _top_level_parts(net):
        def pre(_m: nn.Module, _inp: Any, name: str = name) -> None:
            starts[name] = now()

        def post(_m: nn.Module, _inp: Any, _out: Any, name: str = name) -> None:
            totals[name] = totals.get(name, 0.0) + (now() - starts[name]) * 1e3

        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))
    try:
        with torch.inference_mode():
            for _ in range(runs):
                run_once()
    finally:
        for h in handles:
            h.remove()
    return totals
