"""Contract tests run over every shipped space: what a sampled network must do."""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from search_spaces import available_spaces, build, count_macs, count_params, load_space, profile

# ONNX Runtime and PyTorch use different conv kernels: fp32 outputs agree to ~1e-5 relative.
ATOL, RTOL = 1e-4, 1e-3


def _sampled(name: str, n: int) -> list:
    space = load_space(name)
    rng = np.random.default_rng(123)
    return [space.sample(rng) for _ in range(n)] + space.extremes()[:1]


@pytest.mark.parametrize("name", available_spaces())
def test_sampled_networks_train_export_and_agree_with_onnxruntime(name: str) -> None:
    torch.manual_seed(0)
    for arch in _sampled(name, 2):
        model = build(arch, num_classes=10)
        x = torch.randn(2, 3, 64, 64)
        # forward and backward
        out = model(x)
        assert out.shape == (2, 10)
        out.sum().backward()
        assert all(p.grad is not None for p in model.parameters())
        # export, check, compare in ONNX Runtime
        model.eval()
        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (x,), buf, dynamo=False, opset_version=17,
                              input_names=["input"], output_names=["logits"])
        proto = onnx.load_from_string(buf.getvalue())
        onnx.checker.check_model(proto)
        sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
        got = sess.run(None, {"input": x.numpy()})[0]
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("name", available_spaces())
def test_profile_counts_match_real_build(name: str) -> None:
    for arch in _sampled(name, 2):
        p = profile(arch, resolution=64, num_classes=10)
        model = build(arch, num_classes=10)
        assert p.params == count_params(model)
        assert p.macs == count_macs(model, (1, 3, 64, 64))
        assert p.macs > 0


def test_se_and_head_are_counted() -> None:
    space = load_space("tiny")
    arch = space.sample(np.random.default_rng(0))
    from dataclasses import replace

    no_se = replace(arch, blocks=tuple(replace(b, se_ratio=0.0) for b in arch.blocks))
    with_se = replace(arch, blocks=tuple(replace(b, se_ratio=0.25) for b in arch.blocks))
    assert profile(with_se).params > profile(no_se).params
    assert profile(with_se).macs > profile(no_se).macs
    assert profile(replace(arch, head_chs=64)).macs > profile(replace(arch, head_chs=0)).macs
