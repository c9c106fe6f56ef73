"""The learned predictor end to end, on real ONNX Runtime measurements of the ``tiny`` space.

One small dataset is collected per module (about 25 architectures at 1x3x64x64 with short
measurement settings), then trained, saved, loaded, refused, refitted; and one for a predictor of
the tail (10 architectures at 1x3x32x32, each timed 1,000 times as a p99 needs). These tests check the
workflow, not accuracy: that is the benchmark's job (``python -m benchmarks.prediction.predictor``). The
machine may be busy with other work, so collection here accepts every measurement
(``min_cpu_share=0``, a lenient stability threshold) instead of retrying disturbed ones; one test
makes every measurement count as disturbed to check the retries.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from latency_predictor import LatencyEstimator, MeasurementError, PredictorMismatchError
from latency_predictor.cli import _collect_parser as collect_parser
from latency_predictor.cli import collect_main, collect_options, key_value_args, train_main
from latency_predictor.errors import ConfigError, DatasetError, PredictorFileError
from latency_predictor.estimators import make_latency_estimator
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.fingerprint import DeviceFingerprint
from latency_predictor.measurement.statistic import MIN_RUNS, protocol_for, stat_value
from latency_predictor.prediction.collection import collect, coverage_plan
from latency_predictor.prediction.dataset import RECORDS_FILE, Dataset, dataset_tracking_record
from latency_predictor.prediction.hybrid import (
    POINTER_FILE,
    HybridEstimator,
    add_measurements,
    refit,
    select_for_measurement,
)
from latency_predictor.prediction.metrics import accuracy_metrics
from latency_predictor.prediction.predictor import (
    PredictorEstimator,
    expected_target,
    load_predictor,
    predictor_tracking_record,
    read_predictor,
)
from latency_predictor.prediction.target import PredictorTarget
from latency_predictor.prediction.training import (
    NOISY_SESSIONS,
    fit_additive,
    noise_estimate,
    session_warning,
    train_predictor,
    usable_table,
)
from search_spaces import Arch, SearchSpace, arch_id_of, load_space

SHAPE = (1, 3, 64, 64)
# short runs; every attempt accepted as stable (the machine may be busy: these tests check the workflow)
MEASURE = {"warmup_runs": 2, "warmup_s": 0.0, "min_runs": 10, "min_time_s": 0.0, "max_time_s": 0.5, "max_repeats": 1,
           "stability_threshold": 100.0, "min_cpu_share": 0.0}
N = 24
P99_SHAPE = (1, 3, 32, 32)
P99_N = 10
P99_MEASURE = protocol_for("p99", MEASURE)  # the same settings with 1,000 timed runs and no time cap


@pytest.fixture(scope="module")
def space() -> SearchSpace:
    return load_space("tiny")


@pytest.fixture(scope="module")
def estimator(tmp_path_factory: pytest.TempPathFactory) -> LatencyEstimator:
    slots = tmp_path_factory.mktemp("slots")
    return make_estimator("onnxruntime", input_shape=SHAPE, measure=MEASURE, slot_dir=slots)


@pytest.fixture(scope="module")
def data_dir(space: SearchSpace, estimator: LatencyEstimator, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "tiny"
    s = collect(space, estimator, out, N, repeats=3, min_cpu_share=0.0, progress=False)
    assert (s.new_archs, s.repeated, s.total_archs) == (N, 3, N)
    return out


@pytest.fixture(scope="module")
def trained(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    predictor, report = train_predictor(Dataset.open(data_dir), test_fraction=0.25, seed=3)
    path = predictor.save(tmp_path_factory.mktemp("pred") / "tiny.json")
    return path, report


@pytest.fixture(scope="module")
def p99_slots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("p99slots")


@pytest.fixture(scope="module")
def p99_data(space: SearchSpace, p99_slots: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    est = make_estimator("onnxruntime", input_shape=P99_SHAPE, measure=P99_MEASURE, slot_dir=p99_slots)
    out = tmp_path_factory.mktemp("data") / "tiny-p99"
    s = collect(space, est, out, P99_N, repeats=0, min_cpu_share=0.0, progress=False, statistic="p99")
    assert s.new_archs == P99_N
    return out


@pytest.fixture(scope="module")
def p99_predictor(p99_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    predictor, _ = train_predictor(Dataset.open(p99_data), test_fraction=0.25, statistic="p99")
    return predictor.save(tmp_path_factory.mktemp("pred") / "tiny-p99.json")


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_dataset_holds_full_records(data_dir: Path, estimator: LatencyEstimator, space: SearchSpace) -> None:
    ds = Dataset.open(data_dir, expected=PredictorTarget.create(space, estimator))
    assert len(ds.records) == N + 3
    rec = ds.records[0]
    assert rec.origin == "extreme" and rec.result.source == "measured"
    assert rec.result.input_shape == SHAPE and len(rec.features) > 0
    line = json.loads((data_dir / RECORDS_FILE).read_text().splitlines()[0])
    assert line["fingerprint"] == DeviceFingerprint.of_result(rec.result).digest
    assert line["result"]["stats"]["p50"] == rec.result.latency_ms
    origins = {r.origin for r in ds.records}
    assert {"extreme", "axis", "uniform", "mutation", "repeat"} <= origins
    files, params = dataset_tracking_record(data_dir)
    assert [f.name for f in files] == ["dataset.json", RECORDS_FILE] and params["archs"] == N


def test_collect_resumes_without_measuring_twice(
    space: SearchSpace, estimator: LatencyEstimator, data_dir: Path, tmp_path: Path
) -> None:
    # a copy, so the shared dataset stays as the other tests expect it
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in data_dir.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    before = Dataset.open(copy)
    s = collect(space, estimator, copy, 2, repeats=0, min_cpu_share=0.0, progress=False)
    after = Dataset.open(copy)
    assert s.new_archs == 2 and len(after.records) == len(before.records) + 2
    assert after.measured_archs() > before.measured_archs()
    first = [r.arch for r in after.records if r.origin not in ("repeat", "retry")]
    assert len(first) == len(set(first))  # every architecture measured once, repeats aside


def test_disturbed_measurements_are_retried_and_left_out(
    space: SearchSpace, estimator: LatencyEstimator, tmp_path: Path
) -> None:
    # a CPU share of 2 per thread is impossible: every measurement counts as disturbed
    s = collect(space, estimator, tmp_path / "d", 2, retries=1, repeats=1, min_cpu_share=2.0, progress=False)
    assert (s.new_archs, s.retried, s.repeated, s.still_disturbed) == (2, 2, 0, 2)
    ds = Dataset.open(tmp_path / "d")
    assert [r.origin for r in ds.records] == ["extreme", "extreme", "retry", "retry"]
    assert all(r.disturbed and "other work took the CPU" in r.disturbed for r in ds.records)
    assert len(ds.table()) == 0 and len(ds.table(include_disturbed=True)) == 2
    with pytest.raises(DatasetError, match="0 usable architectures"):
        train_predictor(ds)


def test_a_dataset_can_take_each_networks_fastest_session(data_dir: Path) -> None:
    ds = Dataset.open(data_dir)
    median, fastest = ds.table(), ds.table(combine="min")
    assert median.archs == fastest.archs
    twice = [i for i, n in enumerate(median.records) if n == 2]
    assert len(twice) == 3  # the repeats
    for i in range(len(median)):
        p50s = [r.result.latency_ms for r in ds.records if r.arch == median.archs[i]]
        assert fastest.latency_ms[i] == min(p50s) and median.latency_ms[i] == pytest.approx(np.median(p50s))
    assert all(fastest.latency_ms[i] < median.latency_ms[i] for i in twice)
    with pytest.raises(ConfigError, match=r"combine must be one of \['median', 'min'\], got 'mean'"):
        ds.table(combine="mean")


def test_a_second_session_for_every_network_is_one_more_collect_run(
    space: SearchSpace, estimator: LatencyEstimator, tmp_path: Path
) -> None:
    # the recipe docs/predictor.md gives for a shared host: collect, then collect n=0 repeats=N
    data = tmp_path / "d"
    collect(space, estimator, data, 4, repeats=0, min_cpu_share=0.0, progress=False)
    s = collect(space, estimator, data, 0, repeats=4, min_cpu_share=0.0, progress=False)
    assert (s.new_archs, s.repeated) == (0, 4)
    ds = Dataset.open(data)
    assert ds.table().records.tolist() == [2] * 4
    fastest = ds.table(combine="min")
    for arch, ms in zip(fastest.archs, fastest.latency_ms, strict=True):
        assert ms == min(r.result.latency_ms for r in ds.records if r.arch == arch)


def _slowed_sessions(data_dir: Path, copy: Path, stalled: int = 0) -> Path:
    """A copy of ``data_dir`` whose repeats' sessions ran as if other work on the host had slowed
    them by a third: each repeat is its network's first record at 1.33x (the host's own sessions
    differ too, so a measured repeat could land anywhere); with ``stalled`` first records whose
    runs include a long stall (cv 20)."""
    copy.mkdir()
    for f in data_dir.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    lines = (copy / RECORDS_FILE).read_text().splitlines()
    first: dict[str, dict[str, Any]] = {}
    for i, line in enumerate(lines):
        d = json.loads(line)
        stats = first.setdefault(d["arch"], d["result"]["stats"])
        if d["origin"] == "repeat":
            d["result"]["stats"] = {**stats, **{k: 1.33 * stats[k] for k in ("min", "mean", "std", "p50", "p90",
                                                                              "p95", "p99")},
                                    "ci95": {k: [1.33 * v for v in ci] for k, ci in stats.get("ci95", {}).items()}}
        if i < stalled:
            d["result"]["stats"] = {**d["result"]["stats"], "std": 20 * d["result"]["stats"]["mean"], "cv": 20.0}
        lines[i] = json.dumps(d)
    (copy / RECORDS_FILE).write_text("\n".join(lines) + "\n")
    return copy


def test_a_dataset_whose_sessions_differ_is_told_to_measure_each_network_again(data_dir: Path, tmp_path: Path) -> None:
    copy = _slowed_sessions(data_dir, tmp_path / "copy")
    _, report = train_predictor(Dataset.open(copy), test_fraction=0.25)
    # the sessions are timed on this host, so their own noise moves the estimate: well above the threshold, not exact
    assert report.noise["sigma_between"] > 2 * NOISY_SESSIONS
    assert report.warning is not None and "two sessions of the same network differ by" in report.warning
    assert f"n=0 repeats={N - 3} out=<the same folder>) and train with combine=min" in report.warning
    assert report.warning.startswith(f"only {N} usable architectures")  # the size warning stays first
    # every network with its fastest of two sessions: nothing to add; sessions that agree: nothing to say
    table = Dataset.open(copy).table(combine="min")
    twice = table.subset([i for i, n in enumerate(table.records) if n == 2])
    assert session_warning(report.noise, twice, "min") is None
    assert session_warning(report.noise, twice, "median") is not None
    # every network already timed twice: only the training is to change
    assert "slows whole sessions; train with combine=min" in str(session_warning(report.noise, twice, "median"))
    assert session_warning({**report.noise, "sigma_between": 0.03}, table, "median") is None


def test_one_stalled_record_does_not_hide_the_difference_between_sessions(data_dir: Path, tmp_path: Path) -> None:
    # a busy host can stall one record's runs; its within-run spread must not cancel the sessions' difference
    clean, stalled = (Dataset.open(_slowed_sessions(data_dir, tmp_path / name, n)) for name, n in (("a", 0), ("b", 1)))
    clean_noise, stalled_noise = (noise_estimate(ds, ds.table()) for ds in (clean, stalled))
    assert stalled_noise["sigma_between"] > 2 * NOISY_SESSIONS
    assert stalled_noise["sigma_between"] == pytest.approx(clean_noise["sigma_between"], rel=0.25)


def test_the_train_command_can_learn_each_networks_fastest_session(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.json"
    assert train_main([f"data={data_dir}", f"out={out}", "combine=min", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["combine"] == "min"
    table = Dataset.open(data_dir).table(combine="min")
    fastest = dict(zip(table.archs, table.latency_ms, strict=True))
    assert rep["measured_ms"] == [fastest[a] for a in rep["test_archs"]]
    assert read_predictor(out).training["combine"] == "min"
    assert train_main([f"data={data_dir}", f"out={out}", "combine=min"]) == 0
    assert "statistic: p50 (each architecture's lowest p50 over its records)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        train_main([f"data={data_dir}", f"out={out}", "combine=mean"])
    assert "invalid choice: 'mean'" in capsys.readouterr().err


def test_collect_refuses_another_setting_before_measuring(space: SearchSpace, data_dir: Path, tmp_path: Path) -> None:
    other = make_estimator("onnxruntime", input_shape=(1, 3, 32, 32), measure=MEASURE, slot_dir=tmp_path)
    n_before = len(Dataset.open(data_dir).records)
    with pytest.raises(PredictorMismatchError, match="input shape 1x3x32x32 here, 1x3x64x64 in the dataset"):
        collect(space, other, data_dir, 1, progress=False)
    assert len(Dataset.open(data_dir).records) == n_before


def test_coverage_plan_starts_with_the_corners(space: SearchSpace) -> None:
    plan = coverage_plan(space, seed=0)
    firsts = [next(plan) for _ in range(len(space.extremes()) + 20)]
    assert [a for a, o in firsts[: len(space.extremes())]] == space.extremes()
    axis = [a for a, o in firsts if o == "axis"]
    assert axis and all(space.contains(a) for a, _ in firsts)


def test_metrics_are_computed_on_held_out_archs_only(trained: tuple[Path, object], data_dir: Path) -> None:
    path, report = trained
    pred = read_predictor(path)
    train_ids = set(pred.training["train_arch_ids"])
    test_archs = report.test_archs  # type: ignore[attr-defined]
    assert not train_ids & {arch_id_of(a) for a in test_archs}
    assert set(pred.training["test_arch_ids"]) == {arch_id_of(a) for a in test_archs}
    # the figures are exactly those of the saved model on the held-out archs
    measured = np.array(report.measured_ms)  # type: ignore[attr-defined]
    got = accuracy_metrics(measured, pred.predict_many(test_archs))
    assert got == report.models["additive"]  # type: ignore[attr-defined]
    assert set(report.models) == {"additive", "macs", "lookup_table"}  # type: ignore[attr-defined]
    # and that model was fitted without them: refitting on the training archs alone reproduces it
    ds = Dataset.open(data_dir)
    table, _ = usable_table(ds)
    train_rows = [i for i, a in enumerate(table.archs) if arch_id_of(a) in train_ids]
    assert len(train_rows) == len(train_ids)
    again = fit_additive(ds, table.subset(train_rows), seed=3)
    np.testing.assert_allclose(again.coef, pred.model.coef)
    n = report.noise  # type: ignore[attr-defined]
    assert 0 <= n["ceiling_10"] <= 1 and n["repeat_pairs"] >= 1


def test_save_load_predict(trained: tuple[Path, object], space: SearchSpace, estimator: LatencyEstimator) -> None:
    path, report = trained
    pred = load_predictor(path, PredictorTarget.create(space, estimator), space)
    assert isinstance(pred, LatencyEstimator)
    archs = [Arch.decode(a) for a in report.test_archs]  # type: ignore[attr-defined]
    batch = pred.predict_many(archs)
    np.testing.assert_allclose(batch, report.predictions["additive"])  # type: ignore[attr-defined]
    res = pred.measure(archs[0])
    assert res.source == "predicted" and res.backend == "predictor"
    assert res.latency_ms == pytest.approx(batch[0]) and res.input_shape == SHAPE
    assert res.extra["uncertainty_ms"] >= 0 and res.extra["error_band_rel"] == pred.error_band
    assert res.extra["predicted_backend"] == "onnxruntime"
    outside = load_space("mobile").extremes()[0]
    with pytest.raises(ConfigError, match="not in space 'tiny'"):
        pred.measure(outside)
    files, params = predictor_tracking_record(path)
    assert files == [path] and params["space"] == "tiny" and params["predictor_digest"] == pred.digest
    # a model that predicts no latency fails that candidate with a line naming it, not with a division by zero
    pred.model.coef = np.zeros_like(pred.model.coef)  # type: ignore[attr-defined]
    pred.model.intercept = 0.0  # type: ignore[attr-defined]
    with pytest.raises(MeasurementError, match=rf"predicts 0 ms for {re.escape(archs[0].encode())}: no latency"):
        pred.measure(archs[0])


def test_load_refuses_a_mismatched_predictor(
    trained: tuple[Path, object], space: SearchSpace, estimator: LatencyEstimator, tmp_path: Path
) -> None:
    path, _ = trained
    good = PredictorTarget.create(space, estimator)
    cases = {
        "space": (PredictorTarget.create(load_space("mobile"), estimator), "space 'mobile' here, 'tiny'"),
        "shape": (expected_target(space, "onnxruntime", input_shape=(1, 3, 96, 96), slot_dir=tmp_path),
                  "input shape 1x3x96x96 here"),
        "backend": (expected_target(space, "torch", input_shape=SHAPE, slot_dir=tmp_path),
                    "backend 'torch' here, 'onnxruntime'"),
        "device": (PredictorTarget(good.space, good.space_digest, DeviceFingerprint.create(
            "onnxruntime", "cpu", "fp32", {**good.fingerprint.environment, "device_name": "Other CPU"}),
            good.input_shape), "device_name 'Other CPU' here"),
    }
    for expected, phrase in cases.values():
        with pytest.raises(PredictorMismatchError, match=phrase):
            load_predictor(path, expected)
    assert load_predictor(path, good).target == good


def test_load_rejects_unexpected_content(trained: tuple[Path, object], tmp_path: Path) -> None:
    path, _ = trained
    doc = json.loads(path.read_text())

    def write(obj: object) -> Path:
        p = tmp_path / "bad.json"
        p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
        return p

    bad_coef = json.loads(json.dumps(doc))
    bad_coef["model"]["coef"][0] = "__import__('os')"
    short = json.loads(json.dumps(doc))
    short["model"]["coef"] = short["model"]["coef"][:-1]
    extra = {**doc, "code": "print(1)"}
    negative = json.loads(json.dumps(doc))
    negative["model"]["coef"][0] = -1.0
    bad_training = json.loads(json.dumps(doc))
    bad_training["training"]["report"] = [1]
    edited = json.loads(json.dumps(doc))
    edited["target"]["fingerprint"]["environment"]["onnxruntime"] = "9.9"
    for content, phrase in [
        ("\x80\x04pickle", "not a JSON document"), ("[1, 2]", "not a latency predictor"),
        ({**doc, "version": 99}, "version 99"), (extra, "exactly the keys"),
        (bad_coef, "coef must be a list of numbers"), (short, "entries, expected"),
        (negative, "non-negative"), (edited, "does not match its fingerprint"),
        (bad_training, "training.report must be a mapping"),
        (path.read_text().replace('"intercept": ', '"intercept": NaN, "x": ', 1), "exactly the keys"),
    ]:
        with pytest.raises(PredictorFileError, match=phrase):
            read_predictor(write(content))
    with pytest.raises(PredictorFileError, match="cannot read"):
        read_predictor(tmp_path / "missing.json")


def test_train_command_line(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.json"
    assert train_main([f"data={data_dir}", f"out={out}", "test_fraction=0.25"]) == 0
    text = capsys.readouterr().out
    assert "noise ceiling" in text and "lookup_table" in text and out.exists()
    # 24 architectures is far below the recommended size: the user is told, with how many more to collect
    assert f"warning: only {N} usable architectures" in text and f"collect at least {100 - N} more" in text
    assert train_main(["--data", str(data_dir), "--out", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    assert f"only {N} usable architectures" in captured.err
    rep = json.loads(captured.out)
    assert rep["warning"] and f"n={100 - N}" in rep["warning"]
    assert rep["n_test"] + rep["n_train"] + rep["excluded_disturbed"] == N
    assert set(rep["models"]["additive"]) >= {"rmse_ms", "mape", "within_5", "within_10", "spearman", "kendall"}
    assert train_main(["--data", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert "no latency dataset" in capsys.readouterr().err


def test_collect_command_line_refuses_bad_input_before_measuring(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert collect_main(["+space=nonexistent", "latency=onnxruntime", "n=1", f"out={tmp_path}/d"]) == 2
    assert "no space named 'nonexistent'" in capsys.readouterr().err
    assert collect_main(["+space=tiny", "latency=tvm", "n=1", f"out={tmp_path}/d"]) == 2
    assert "unknown latency backend 'tvm'" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_hybrid_confirm_add_and_refit(
    data_dir: Path, trained: tuple[Path, object], space: SearchSpace, estimator: LatencyEstimator, tmp_path: Path
) -> None:
    path, _ = trained
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in data_dir.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    ds = Dataset.open(copy)
    pred = load_predictor(path, ds.target, space)
    rng = np.random.default_rng(7)
    candidates = [space.sample(rng) for _ in range(40)]
    p, spread = pred.predict_with_uncertainty(candidates)
    target = float(np.median(p))
    chosen = select_for_measurement(candidates, p, 3, band=pred.error_band, target_ms=target,
                                    uncertainty_ms=spread, exclude=ds.measured_archs())
    assert 1 <= len(chosen) <= 3 and chosen[0].reason == "near_target"
    records = add_measurements(ds, [estimator.measure(c.arch) for c in chosen], min_cpu_share=0.0)
    assert [r.origin for r in records] == ["confirm"] * len(chosen)
    new = refit(Dataset.open(copy))
    assert isinstance(new, PredictorEstimator)
    assert {arch_id_of(c.arch.encode()) for c in chosen} <= set(new.training["train_arch_ids"])
    with pytest.raises(DatasetError, match="only measured"):
        add_measurements(ds, [pred.measure(candidates[0])])


# ---------------------------------------------------------------------- a predictor of the tail

def test_a_p99_predictor_predicts_the_tail_of_the_same_measurements(p99_data: Path) -> None:
    ds = Dataset.open(p99_data)
    assert all(r.result.stats.n >= MIN_RUNS["p99"] for r in ds.records)
    t50, t99 = ds.table(), ds.table(statistic="p99")
    assert t99.archs == t50.archs and len(t99) == P99_N and t99.too_few_runs == 0
    assert np.all(t99.latency_ms >= t50.latency_ms)
    p50, _ = train_predictor(ds, test_fraction=0.25)
    p99, report = train_predictor(ds, test_fraction=0.25, statistic="p99")
    assert (p50.statistic, p99.statistic, report.statistic) == ("p50", "p99", "p99")
    assert report.excluded_few_runs == 0 and "statistic: p99" in report.table()
    archs = [Arch.decode(a) for a in t50.archs]
    tail, median = p99.predict_many(archs), p50.predict_many(archs)
    assert np.median(tail / median) > 1 and tail.mean() > median.mean()
    res = p99.measure(archs[0])
    assert res.source == "predicted" and res.extra["statistic"] == "p99"
    assert stat_value(res, "p99") == pytest.approx(tail[0])
    assert p50.measure(archs[0]).extra["statistic"] == "p50"


def test_records_with_too_few_runs_are_left_out_of_a_p99_and_counted(
    space: SearchSpace, data_dir: Path, p99_data: Path, p99_slots: Path, tmp_path: Path
) -> None:
    # every record of the main dataset has 10 runs: no p99 at all, and the error says how to collect one
    with pytest.raises(DatasetError, match=rf"0 usable architectures for a p99 predictor \(0 left out as disturbed, "
                                           rf"{N} with fewer than 1000 timed runs.*--statistic p99"):
        train_predictor(Dataset.open(data_dir), statistic="p99")
    # two architectures timed 10 times join the p99 dataset: usable for a p50, left out of a p99
    mixed = _copy(p99_data, tmp_path / "mixed")
    short = make_estimator("onnxruntime", input_shape=P99_SHAPE, measure=MEASURE, slot_dir=p99_slots)
    collect(space, short, mixed, 2, repeats=0, min_cpu_share=0.0, progress=False)
    ds = Dataset.open(mixed)
    assert len(ds.table()) == P99_N + 2
    t99 = ds.table(statistic="p99")
    assert (len(t99), t99.too_few_runs) == (P99_N, 2)
    _, report = train_predictor(ds, test_fraction=0.25, statistic="p99")
    assert report.excluded_few_runs == 2 and len(report.train_archs) + len(report.test_archs) == P99_N
    assert "2 left out: fewer than 1000 timed runs" in report.table()
    assert report.to_dict()["excluded_few_runs"] == 2


def test_collect_for_a_p99_times_enough_runs_and_refuses_fewer(
    space: SearchSpace, estimator: LatencyEstimator, tmp_path: Path
) -> None:
    with pytest.raises(MeasurementError, match=r"a p99 from \d+ timed runs .* needs at least 1000"):
        collect(space, estimator, tmp_path / "short", 1, repeats=0, min_cpu_share=0.0, progress=False,
                statistic="p99")
    assert Dataset.open(tmp_path / "short").records == []  # refused before it was stored
    given = ["+space=tiny", "latency=onnxruntime", "min_runs=30", "max_time_s=3"]
    p99 = collect_options(collect_parser().parse_args(key_value_args([*given, "statistic=p99"])))["measure"]
    p50 = collect_options(collect_parser().parse_args(key_value_args(given)))["measure"]
    assert (p99.min_runs, p99.max_time_s) == (1000, None) and (p50.min_runs, p50.max_time_s) == (30, 3.0)


def test_the_train_command_learns_the_statistic_it_is_given(
    p99_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p99.json"
    assert train_main([f"data={p99_data}", f"out={out}", "statistic=p99", "test_fraction=0.25", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["statistic"] == "p99" and rep["excluded_few_runs"] == 0 and rep["n_train"] + rep["n_test"] == P99_N
    doc = json.loads(out.read_text())
    assert doc["statistic"] == "p99" and doc["training"]["statistic"] == "p99"
    assert read_predictor(out).statistic == "p99"


def test_a_predictor_file_names_its_statistic_and_an_old_one_is_a_p50(
    trained: tuple[Path, object], tmp_path: Path
) -> None:
    path, _ = trained
    doc = json.loads(path.read_text())
    assert doc["statistic"] == "p50"
    new = read_predictor(path)
    del doc["statistic"]  # as files were written before predictors of the tail
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    loaded = read_predictor(old)
    assert loaded.statistic == "p50" and loaded.digest == new.digest
    assert loaded.measure(load_space("tiny").extremes()[0]).extra["statistic"] == "p50"
    with pytest.raises(PredictorMismatchError, match=r"statistic 'p99' here, 'p50' in the predictor"):
        load_predictor(path, new.target, statistic="p99")
    old.write_text(json.dumps({**doc, "statistic": "p42"}))
    with pytest.raises(PredictorFileError, match=r"statistic 'p42' is not one of"):
        read_predictor(old)


def test_a_search_takes_only_a_predictor_of_its_statistic(
    trained: tuple[Path, object], p99_predictor: Path, p99_data: Path, p99_slots: Path, space: SearchSpace,
    tmp_path: Path,
) -> None:
    p50_path, _ = trained
    classes = read_predictor(p50_path).target.num_classes
    with pytest.raises(PredictorMismatchError,
                       match=r"statistic 'p99' here, 'p50' in the predictor.*train .*--statistic p99"):
        make_latency_estimator("predictor", SHAPE, {"path": str(p50_path)}, {}, classes, space, target_stat="p99")
    est = make_latency_estimator("predictor", P99_SHAPE, {"path": str(p99_predictor)}, {}, classes, space,
                                 target_stat="p99")
    assert isinstance(est, PredictorEstimator) and est.statistic == "p99"
    with pytest.raises(PredictorMismatchError, match=r"statistic 'p50' here, 'p99' in the predictor"):
        make_latency_estimator("predictor", P99_SHAPE, {"path": str(p99_predictor)}, {}, classes, space)
    # hybrid: a confirmation is timed with the runs a p99 needs (the search's protocol has 10), and a refit
    # predicts the p99 too
    dataset = _copy(p99_data, tmp_path / "hybrid")
    opts = {"path": str(p99_predictor), "hybrid": True, "dataset": str(dataset), "refit_every": 1,
            "measure_options": {"slot_dir": str(p99_slots)}}
    hybrid = make_latency_estimator("predictor", P99_SHAPE, opts, MEASURE, classes, space, target_ms=1.0,
                                    target_stat="p99")
    assert isinstance(hybrid, HybridEstimator)
    arch = space.sample(np.random.default_rng(5))
    confirmed = hybrid.confirm(arch, est.measure(arch), "near_target")
    assert confirmed.source == "measured" and confirmed.stats.n >= MIN_RUNS["p99"]
    assert Dataset.open(dataset).records[-1].origin == "confirm"
    refitted = read_predictor(dataset / (dataset / POINTER_FILE).read_text().strip())
    assert refitted.statistic == "p99" and refit(Dataset.open(dataset), statistic="p99").statistic == "p99"
