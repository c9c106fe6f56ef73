"""Export: the OpenVINO IR and the LiteRT flatbuffer beside model.onnx, each checked against PyTorch."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from nas.deploy.export import ExportResult, ExportTarget, export_candidate, summary
from search_spaces import Arch, build
from tests.nas.test_export import ARCH, fast_config

ATOL, RTOL = 1e-4, 1e-3
"""The export's default check tolerance (``check.atol``, ``check.rtol``), the ONNX model's too."""
NEEDS_OPENVINO = pytest.mark.skipif(importlib.util.find_spec("openvino") is None,
                                    reason="openvino is not installed (pip install 'latnas[openvino]')")
NEEDS_LITERT = pytest.mark.skipif(
    importlib.util.find_spec("ai_edge_litert") is None or importlib.util.find_spec("litert_torch") is None,
    reason="ai-edge-litert or litert-torch is not installed (pip install 'latnas[litert]')")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    target = ExportTarget(Arch.decode(ARCH), "arch_string")
    res = export_candidate(target, fast_config(tmp_path_factory.mktemp("exports"), space="tiny", num_classes=10,
                                               runtimes=["openvino", "litert"]))
    return res.folder, res.report


def _pytorch(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """A seeded input of the export's static shape and the unfused network's logits on it (from ``model.pt``)."""
    net = build(Arch.decode(ARCH), num_classes=10)
    net.load_state_dict(torch.load(folder / "model.pt"))
    net.eval()
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        return x.numpy(), net(x).numpy()


def _check(report: dict, name: str) -> dict:
    return next(c for c in report["checks"] if c["name"] == report["runtimes"][name]["check"])


@NEEDS_OPENVINO
def test_openvino_ir_is_written_beside_the_onnx_model_and_matches_pytorch(exported: tuple[Path, dict]) -> None:
    import openvino

    from latency_predictor.measurement.backends.openvino_backend import shared_core

    folder, report = exported
    assert (folder / "model.xml").is_file() and (folder / "model.bin").is_file()
    x, want = _pytorch(folder)
    compiled = shared_core(openvino).compile_model(str(folder / "model.xml"), "CPU",
                                                   {"INFERENCE_PRECISION_HINT": "f32"})
    got = np.array(compiled.create_infer_request().infer({0: x})[compiled.output(0)])
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)
    rt = report["runtimes"]["openvino"]
    assert rt["written"] and rt["files"] == ["model.xml", "model.bin"] and rt["converted_from"] == "model.onnx"
    check = _check(report, "openvino")
    assert check["passed"] and (check["atol"], check["rtol"]) == (ATOL, RTOL)
    assert {"model.xml", "model.bin"} <= set(report["files"])
    assert "model.xml" in json.loads((folder / "arch.json").read_text())["load"]
    assert f"`{check['name']}`" in (folder / "report.md").read_text()


@NEEDS_LITERT
def test_tflite_is_written_beside_the_onnx_model_and_matches_pytorch(exported: tuple[Path, dict]) -> None:
    from ai_edge_litert.interpreter import Interpreter

    folder, report = exported
    assert (folder / "model.tflite").is_file()
    x, want = _pytorch(folder)
    interp = Interpreter(model_path=str(folder / "model.tflite"))
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    got = interp.get_tensor(interp.get_output_details()[0]["index"])
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)
    rt = report["runtimes"]["litert"]
    assert rt["written"] and rt["files"] == ["model.tflite"]
    check = _check(report, "litert")
    assert check["passed"] and (check["atol"], check["rtol"]) == (ATOL, RTOL)
    assert "model.tflite" in report["files"]
    assert "model.tflite" in json.loads((folder / "arch.json").read_text())["load"]
    assert f"`{check['name']}`" in (folder / "report.md").read_text()


def test_a_missing_runtime_is_a_note_naming_its_extra_not_an_error(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    # A module set to None in sys.modules cannot be imported or found: as if it were not installed.
    for module in ("openvino", "ai_edge_litert", "litert_torch"):
        monkeypatch.setitem(sys.modules, module, None)
    target = ExportTarget(Arch.decode(ARCH), "arch_string")
    res = export_candidate(target, fast_config(tmp_path, space="tiny", num_classes=10,
                                               runtimes=["openvino", "litert"]))
    for name, files, extra in (("openvino", ("model.xml", "model.bin"), "latnas[openvino]"),
                               ("litert", ("model.tflite",), "latnas[litert]")):
        rt = res.report["runtimes"][name]
        assert not rt["written"] and extra in rt["how_to_install"] and extra in rt["reason"]
        assert not any((res.folder / f).exists() for f in files)
        assert not set(files) & set(res.report["files"])
        assert f"not written: {rt['reason']}" in summary(ExportResult(res.folder, res.report))
        assert rt["reason"] in (res.folder / "report.md").read_text()
    assert all(c["passed"] for c in res.report["checks"])
    assert not any(c["name"].startswith(("openvino", "litert")) for c in res.report["checks"])


def test_runtimes_not_asked_for_are_neither_converted_nor_noted(tmp_path: Path) -> None:
    target = ExportTarget(Arch.decode(ARCH), "arch_string")
    res = export_candidate(target, fast_config(tmp_path, space="tiny", num_classes=10, runtimes=[]))
    assert res.report["runtimes"] == {}
    assert not any((res.folder / f).exists() for f in ("model.xml", "model.bin", "model.tflite"))
    assert "not asked for (`runtimes=[]`)" in (res.folder / "report.md").read_text()
    assert (res.folder / "model.onnx").is_file() and all(c["passed"] for c in res.report["checks"])


def test_a_runtime_the_export_cannot_write_is_refused_naming_the_ones_it_can() -> None:
    from nas.core.config import ExportConfig, validate_export
    from nas.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"runtimes: 'tensorflow' is not one of \['openvino', 'litert'\]"):
        validate_export(ExportConfig(runtimes=["openvino", "tensorflow"]))
