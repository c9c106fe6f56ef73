"""The measurement agent, as real processes on 127.0.0.1: it measures as a local measurement does,
refuses bad requests with a clear error and goes on serving, and a pool outlives a dead agent."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from latency_predictor import ConfigError
from latency_predictor.agent.client import AgentClient, RemoteEstimator
from latency_predictor.errors import (
    AgentRefusedError,
    AgentUnavailableError,
    InvalidModelError,
)
from latency_predictor.estimators import make_latency_estimator
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.export import build_eval_net, export_onnx
from latency_predictor.measurement.fingerprint import DeviceFingerprint
from latency_predictor.prediction.collection import collect
from latency_predictor.prediction.dataset import Dataset
from search_spaces import Arch, load_space
from tests.latency_predictor.agents import TOKEN, Agent, free_port, running_agents
from tests.latency_predictor.conftest import TINY, TINY_SHAPE

MEASURE = {"warmup_runs": 2, "warmup_s": 0.0, "min_runs": 10, "min_time_s": 0.0, "max_time_s": 0.5,
           "max_repeats": 1, "stability_threshold": 100.0, "min_cpu_share": 0.0}
UNKNOWN_TOKEN_ARCH = "act_relu-stem_c8-xb_k3_c16_s1-head_c32"


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    """One agent taking requests up to 1 MiB, for the module."""
    with running_agents(tmp_path_factory.mktemp("slots"), 1, "--max-request-mb", "1") as (a,):
        yield a


def _estimator(*urls: str, token: str = TOKEN) -> RemoteEstimator:
    return RemoteEstimator(list(urls), token=token, input_shape=TINY_SHAPE, num_classes=10, measure=MEASURE)


def _served(agent: Agent) -> int:
    return int(AgentClient(agent.url, TOKEN).health()["served"])


def _still_serving(agent: Agent) -> None:
    before = _served(agent)
    r = _estimator(agent.url).measure(Arch.decode(TINY))
    assert r.source == "measured" and r.latency_ms > 0
    assert _served(agent) == before + 1


def test_agent_measures_with_the_local_protocol_and_the_devices_fingerprint(agent: Agent, slot_dir: Path) -> None:
    est = _estimator(agent.url)
    r = est.measure(Arch.decode(TINY))
    local = make_estimator("onnxruntime", input_shape=TINY_SHAPE, num_classes=10, measure=MEASURE, slot_dir=slot_dir)
    assert r.arch == TINY and r.source == "measured" and r.backend == "onnxruntime"
    assert r.input_shape == TINY_SHAPE and r.stats.n >= MEASURE["min_runs"]
    assert DeviceFingerprint.of_result(r) == DeviceFingerprint.of_estimator(local)  # the agent's machine is this one
    assert r.extra["agent"] == agent.url and r.extra["round_trip_s"] >= r.extra["measure_s"]
    assert "agent_failures" not in r.extra
    assert est.environment()["device_name"] == local.environment()["device_name"]


def test_an_onnx_model_is_measured_as_it_is(agent: Agent) -> None:
    model = export_onnx(build_eval_net(Arch.decode(TINY), num_classes=10), TINY_SHAPE)
    r = _estimator(agent.url).measure_onnx(model, name="tiny.onnx")
    assert r.arch == "tiny.onnx" and r.latency_ms > 0 and r.extra["onnx_bytes"] == len(model)


def test_a_wrong_or_missing_token_is_refused_401(agent: Agent) -> None:
    with pytest.raises(AgentRefusedError, match="401 unauthorised: missing or wrong token") as err:
        _estimator(agent.url, token="not-the-agents-token-at-all").measure(Arch.decode(TINY))
    assert err.value.status == 401
    reply = requests.get(agent.url + "/v1/health", timeout=30)  # no Authorization header
    assert reply.status_code == 401 and reply.json()["error"] == "unauthorised"
    _still_serving(agent)


def test_an_oversized_request_is_refused_413(agent: Agent) -> None:
    with pytest.raises(AgentRefusedError, match=r"413 request_too_large: .* \(1,048,576 bytes") as err:
        _estimator(agent.url).measure_onnx(os.urandom(2 * 2**20))
    assert err.value.kind == "request_too_large"
    _still_serving(agent)


def test_a_malformed_onnx_model_is_refused_422(agent: Agent) -> None:
    with pytest.raises(InvalidModelError, match="422 malformed_onnx: not a valid ONNX model"):
        _estimator(agent.url).measure_onnx(b"this is not a protobuf" * 10)
    # a valid model of another input shape is refused too, naming both shapes
    other = export_onnx(build_eval_net(Arch.decode(TINY), num_classes=10), (1, 3, 64, 64))
    with pytest.raises(InvalidModelError, match=r"shape \[1, 3, 64, 64\].*\[1, 3, 32, 32\]"):
        _estimator(agent.url).measure_onnx(other)
    _still_serving(agent)


def test_an_unknown_architecture_token_is_refused_422_naming_it(agent: Agent) -> None:
    body = {**_estimator(agent.url).settings(), "arch": UNKNOWN_TOKEN_ARCH}
    with pytest.raises(AgentRefusedError, match="422 unknown_arch_token: bad architecture token 'xb_k3_c16_s1'") as err:
        AgentClient(agent.url, TOKEN).measure(body)
    assert err.value.status == 422
    _still_serving(agent)


def test_requests_naming_agent_files_or_not_json_are_refused_422(agent: Agent) -> None:
    client = AgentClient(agent.url, TOKEN)
    body = {**_estimator(agent.url).settings(), "arch": TINY}
    with pytest.raises(ConfigError, match=r"\['slot_dir'\] are the agent's own settings"):
        client.measure({**body, "options": {"slot_dir": "/tmp"}})
    reply = requests.post(agent.url + "/v1/measure", data=b"{not json", timeout=30,
                          headers={"Authorization": f"Bearer {TOKEN}"})
    assert reply.status_code == 422 and reply.json()["error"] == "invalid_request"
    encoded = base64.b64encode(b"x").decode()
    reply = requests.post(agent.url + "/v1/measure", json={**body, "onnx": encoded}, timeout=30,
                          headers={"Authorization": f"Bearer {TOKEN}"})
    assert reply.status_code == 422 and "exactly one of 'arch'" in reply.json()["message"]
    _still_serving(agent)


def test_a_dead_agent_of_the_pool_is_skipped_with_its_reason_recorded(agent: Agent) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    est = _estimator(dead, agent.url)
    r = est.measure(Arch.decode(TINY))
    assert r.extra["agent"] == agent.url
    (failure,) = r.extra["agent_failures"]
    assert failure["agent"] == dead and failure["error"] == "AgentUnavailableError"
    assert "connection refused" in failure["reason"]
    # the next candidate goes to the live agent first: the dead one is tried last for down_s
    assert "agent_failures" not in est.measure(Arch.decode(TINY)).extra
    with pytest.raises(AgentUnavailableError, match="did not answer"):
        est.environment()  # a search's start check insists on every agent of the pool


def test_when_every_agent_is_dead_the_measurement_fails_with_each_reason() -> None:
    dead = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    with pytest.raises(AgentUnavailableError, match="no agent of the pool could measure") as err:
        _estimator(*dead).measure(Arch.decode(TINY))
    assert all(url in str(err.value) for url in dead)


def test_collect_through_the_agent_records_the_devices_fingerprint(agent: Agent, tmp_path: Path) -> None:
    space = load_space("tiny")
    summary = collect(space, _estimator(agent.url), tmp_path / "data", 3, repeats=0, min_cpu_share=0.0,
                      progress=False)
    ds = Dataset.open(summary.path)
    assert summary.new_archs == 3 and len(ds.records) == 3
    assert ds.target.fingerprint == DeviceFingerprint.of_result(ds.records[0].result)
    assert all(r.result.extra["agent"] == agent.url for r in ds.records)


def test_collect_command_line_with_remote_backend(agent: Agent, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from latency_predictor.cli import collect_main as main

    monkeypatch.setenv("LATNAS_AGENT_TOKEN", TOKEN)
    out = tmp_path / "cli"
    rc = main(["+space=tiny", "latency=remote", f"url={agent.url}", "n=2", "repeats=0", "input_shape=1x3x32x32",
               "num_classes=10", "min_runs=10", "min_time_s=0", "warmup_s=0", f"out={out}", "no_progress=true"])
    assert rc == 0
    assert Dataset.open(out).target.fingerprint.backend == "onnxruntime"


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({}, "latency.options.url: required"),
        ({"url": "http://127.0.0.1:1", "token": "x" * 20}, "latency.options.token: not taken"),
        ({"url": "http://127.0.0.1:1", "urls": []}, "latency.options.urls: unknown for latency=remote"),
        ({"url": "127.0.0.1:8765"}, "must look like http://HOST:PORT"),
        ({"url": ["http://127.0.0.1:1", "http://127.0.0.1:1/"]}, "listed more than once"),
        ({"url": "http://127.0.0.1:1", "backend_options": {"slot_dir": "/tmp"}}, "set on the agent"),
        ({"url": "http://127.0.0.1:1", "backend_options": {"thread": 2}}, r"does not take option\(s\) \['thread'\]"),
        ({"url": "http://127.0.0.1:1", "token_env": "LATNAS_NO_SUCH_VARIABLE"},
         r"^no token: set \$LATNAS_NO_SUCH_VARIABLE to the token the agents were started with"),
        ({"url": "http://127.0.0.1:1", "token_file": "/no/such/token"},
         r"^latency.options.token_file '/no/such/token': cannot read it"),
        ({"url": "http://127.0.0.1:1", "token_env": "LATNAS_SHORT_TOKEN"},
         r"^\$LATNAS_SHORT_TOKEN holds 5 characters; use at least 16"),  # as the agent refuses it
    ],
)
def test_bad_remote_options_fail_before_any_agent_is_asked(
    options: dict[str, object], words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LATNAS_AGENT_TOKEN", TOKEN)
    monkeypatch.setenv("LATNAS_SHORT_TOKEN", "short")
    with pytest.raises(ConfigError, match=words):
        make_latency_estimator("remote", TINY_SHAPE, options, {}, 10)


def _agent_command(*args: str, token: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LATNAS_AGENT_TOKEN"}
    if token is not None:
        env["LATNAS_AGENT_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "latency_predictor.agent", *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.mark.slow
def test_the_agent_refuses_to_start_without_a_real_token_or_on_a_taken_port(agent: Agent) -> None:
    no_token = _agent_command("--port", "0", token=None)
    assert no_token.returncode == 2 and "no token: set $LATNAS_AGENT_TOKEN" in no_token.stderr
    short = _agent_command("--port", "0", token="short")
    assert short.returncode == 2 and "use at least 16" in short.stderr
    port = agent.url.rsplit(":", 1)[1]
    taken = _agent_command("--port", port, token=TOKEN)
    assert taken.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in taken.stderr
    negative = _agent_command("--port", "0", "--queue", "-1", token=TOKEN)
    assert negative.returncode == 2 and "queue must be >= 0" in negative.stderr


@pytest.mark.slow
def test_a_request_past_the_time_limit_is_answered_504_and_the_agent_recovers(tmp_path: Path) -> None:
    slow = {**MEASURE, "min_runs": 1_000_000, "min_time_s": 30.0, "max_time_s": 60.0}
    with running_agents(tmp_path, 1, "--time-limit-s", "3") as (a,):
        est = RemoteEstimator([a.url], token=TOKEN, input_shape=TINY_SHAPE, num_classes=10, measure=slow)
        with pytest.raises(AgentUnavailableError, match="no agent of the pool") as err:
            est.measure(Arch.decode(TINY))
        assert "AgentTimeoutError" in str(err.value) and "504 time_limit" in str(err.value)
        assert AgentClient(a.url, TOKEN).health()["worker_restarts"] == 1
        _still_serving(a)


@pytest.mark.slow
def test_a_client_timeout_is_an_agent_timeout(tmp_path: Path) -> None:
    slow = {**MEASURE, "min_runs": 1_000_000, "min_time_s": 5.0, "max_time_s": 10.0}
    with running_agents(tmp_path, 1) as (a,):
        est = RemoteEstimator([a.url], token=TOKEN, input_shape=TINY_SHAPE, num_classes=10, measure=slow,
                              timeout_s=1.0)
        with pytest.raises(AgentUnavailableError) as err:
            est.measure(Arch.decode(TINY))
        assert "AgentTimeoutError: agent" in str(err.value) and "sent no reply within 1 s" in str(err.value)
