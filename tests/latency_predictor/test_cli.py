"""``python -m latency_predictor.measure``: the table, the JSON record, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from latency_predictor.cli import measure_main as main
from latency_predictor.measurement.environment import usable_cpus
from tests.latency_predictor.conftest import TINY

FAST_ARGS = ["--input-shape", "1x3x32x32", "--warmup-runs", "2", "--warmup-s", "0", "--min-runs", "20",
             "--min-time-s", "0", "--max-repeats", "2"]
ROOT = Path(__file__).resolve().parents[2]


def test_cli_measures_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "latency_predictor.measure", TINY, *FAST_ARGS, "--batch-sizes", "1,2",
         "--breakdown", "--breakdown-runs", "5", "--slot-dir", str(tmp_path / "slots"), "--json", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "p50" in proc.stdout and "stable" in proc.stdout and "blocks.2" in proc.stdout
    record = json.loads(out.read_text())
    (r,) = record["results"]
    assert r["arch"] == TINY and r["backend"] == "onnxruntime" and r["input_shape"] == [1, 3, 32, 32]
    assert r["stats"]["p50"] > 0 and set(r["throughput"]) == {"1", "2"}
    assert record["breakdowns"][0]["blocks"][0]["block"] == "stem"
    assert record["command"][:3] == ["python", "-m", "latency_predictor.measure"]


def test_cli_samples_a_space_with_the_torch_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--space", "tiny", "--sample", "2", "--backend", "torch", *FAST_ARGS, "--slot-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and out.count("act_relu-stem_c8") == 2 and "torch on cpu" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [(["mobilenetv2_100", "--backend", "tflite"], "unknown latency backend 'tflite'"),
     (["mobilenetv2_100", "--provider", "cuda"], "install.sh --gpu"),
     (["mobilenetv2_100", "--input-shape", "1x0x224x224"], "dimensions must be positive integers"),
     (["mobilenetv2_100", "--backend", "torch", "--provider", "cpu"], "does not take option(s) ['provider']"),
     (["mobilenetv2_100", "--backend", "tensorrt"], "latnas[tensorrt]"),
     (["mobilenetv2_100", "--min-runs", "0"], "min_runs"),
     *[(["mobilenetv2_100", "--backend", b, "--threads", str(usable_cpus() + 1)],
        f"intra_op_threads={usable_cpus() + 1} is more than the {usable_cpus()} CPU") for b in ("openvino", "litert")],
     (["mobilenetv2_100", "--backend", "litert", "--precision", "fp16"], "cannot run on LiteRT"),
     (["act_relu-stem_c8-mb_k4_e1_c8_s1"], "mb_k4_e1_c8_s1"),
     (["--space", "nosuchspace", "--sample", "1"], "nosuchspace"),
     ([], "nothing to measure")],
)
def test_expected_errors_are_one_line_and_status_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if "--backend" in args and "tensorrt" in args and _has_tensorrt():
        pytest.skip("TensorRT is installed here")
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.startswith("error: ") and err.count("\n") == 1


def _has_tensorrt() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorrt") is not None
