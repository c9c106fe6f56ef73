"""latency=remote: a real search (local Ray cluster, MLflow store in a temporary folder) whose
candidates are measured by two real agents on 127.0.0.1, one of which is killed mid-search."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from latency_predictor import LatencyError
from nas.core.config import SearchConfig
from nas.driver import run_search
from tests.latency_predictor.agents import TOKEN, Agent, free_port, running_agents
from tests.nas.configs import stored_config

# Each measurement takes over a second, so the agent killed during one is killed mid-request.
MEASURE = ("latency.measure.warmup_runs=2", "latency.measure.warmup_s=0", "latency.measure.min_runs=10",
           "latency.measure.min_time_s=1.0", "latency.measure.max_time_s=2.0", "latency.measure.max_repeats=1",
           "latency.measure.stability_threshold=100", "+latency.measure.min_cpu_share=0")
_START = re.compile(r"measure arch=(\S+) start")


def _config(tmp_path: Path, urls: list[str], token_file: Path, *more: str) -> SearchConfig:
    return stored_config(
        tmp_path, "+space=tiny", "target_ms=5", "search.n_trials=6", "search.max_concurrent=2",
        "search.sampler=random", "accuracy=naswot", "data.max_train_samples=256", "data.max_val_samples=128",
        "latency=remote", f"latency.options.url=[{','.join(urls)}]", f"latency.options.token_file={token_file}",
        "latency.input_shape=[1,3,32,32]", *MEASURE, "progress=false", *more,
    )


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_search_with_two_agents_loses_nothing_when_one_is_killed_mid_search(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    with running_agents(tmp_path / "slots", 2) as (a, b):
        killed: dict[str, str] = {}

        def kill_during_second_measurement(agent: Agent) -> None:
            line = agent.wait_for(r"measure arch=\S+ start", count=2)[-1]
            agent.kill()
            match = _START.search(line)
            assert match is not None
            killed["arch"] = match.group(1)

        killer = threading.Thread(target=kill_during_second_measurement, args=(a,), daemon=True)
        killer.start()
        result = run_search(_config(tmp_path, [a.url, b.url], token_file, "name=remote-kill"))
        killer.join(timeout=60)
        assert not killer.is_alive() and "arch" in killed, "agent A was never killed mid-measurement"
        assert a.proc.poll() is not None

    assert len(result.candidates) == 6
    assert all(c.status == "COMPLETED" for c in result.candidates), [c.tags for c in result.candidates]
    by_arch = {c.arch: c for c in result.candidates}
    for c in result.candidates:
        assert c.latency is not None and c.latency["source"] == "measured"
        assert c.latency["extra"]["agent"] in (a.url, b.url)
    # the candidate A was measuring when it died was measured by B, with A's failure recorded
    victim = by_arch[killed["arch"]]
    assert victim.latency is not None
    assert victim.latency["extra"]["agent"] == b.url
    failures = victim.latency["extra"]["agent_failures"]
    assert [f["agent"] for f in failures] == [a.url]
    assert failures[0]["error"] == "AgentUnavailableError"
    # A served one candidate before it died; B served every other
    served_by_a = [c for c in result.candidates if c.latency and c.latency["extra"]["agent"] == a.url]
    assert len(served_by_a) == 1


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.ci
def test_search_refuses_to_start_when_an_agent_of_the_pool_does_not_answer(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    dead = f"http://127.0.0.1:{free_port()}"
    with running_agents(tmp_path / "slots", 1) as (a,):
        with pytest.raises(LatencyError, match=f"1 of 2 agent.*{re.escape(dead)} did not answer: connection refused"):
            run_search(_config(tmp_path, [a.url, dead], token_file, "name=remote-dead"))
        assert a.wait_for("describe onnxruntime done")
