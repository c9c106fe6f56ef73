"""Open a search's record in the real MLflow UI with headless Chromium, screenshot it, check what shows.

    python scripts/mlflow_ui_check.py                      # a small search in a fresh home, then the UI
    python scripts/mlflow_ui_check.py --store /abs/.latnas/mlflow.db --search <name>   # an existing store
    python scripts/mlflow_ui_check.py --out ui-shots       # where the screenshots go (default: <home>/ui-check)

What a user sees without touching any setting, checked in the rendered page (``--dump-dom``)
and saved as PNG screenshots to look at:

1. for comparison, the experiment's plain link, which MLflow 3.17 opens in its GenAI overview
   whatever the experiment's kind tag says (one GenAI / model-training switch for all experiments);
2. the link the search prints (``StoreWriter.ui_link``) opens the model-training runs table with
   the search's candidates only, best reward first, named for what they are
   (``<arch_id> acc 0.912, 12.31 ms, meets target``);
3. the parent run carries the leaderboard as an MLflow table (``leaderboard_table.json``), which
   the artifact view renders;
4. the compare view of the top candidates (the README's "compare candidates") renders.

Needs Chromium (Debian: ``apt-get install chromium``; ``$CHROMIUM`` names another binary) and
MLflow's UI (``mlflow ui``, part of the ``mlflow`` package). Exit status 0 when every check holds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL_SEARCH = [
    "+space=tiny", "target_ms=5", "search.n_trials=6", "data.max_train_samples=256", "data.max_val_samples=128",
    "train.epochs=1", "latency.input_shape=[1,3,64,64]", "latency.measure.min_runs=10",
    "latency.measure.min_time_s=0.05", "latency.measure.max_time_s=0.5", "latency.measure.max_repeats=1",
    "progress=false",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _chromium() -> str:
    for name in (os.environ.get("CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return str(shutil.which(name))
    sys.exit("mlflow_ui_check: no Chromium found (apt-get install chromium, or set $CHROMIUM)")


def _small_search(home: Path, name: str) -> Path:
    print(f"mlflow_ui_check: running a small search ({name}) in {home} ...", flush=True)
    env = dict(os.environ, LATNAS_HOME=str(home))
    subprocess.run([sys.executable, "-m", "nas.search", *SMALL_SEARCH, f"name={name}"], cwd=ROOT, env=env,
                   check=True, timeout=1800)
    return home / "mlflow.db"


def _render(chromium: str, url: str, png: Path, width: int = 1600, height: int = 1000) -> str:
    """Screenshot ``url`` into ``png`` and return the rendered DOM (two loads of the page)."""
    print(f"mlflow_ui_check: rendering {png.name} ...", flush=True)
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--disable-background-networking", "--hide-scrollbars", "--no-first-run",
              f"--window-size={width},{height}", "--virtual-time-budget=15000"]
    try:
        subprocess.run([*common, f"--screenshot={png}", url], check=True, capture_output=True, timeout=300)
        dom = subprocess.run([*common, "--dump-dom", url], check=True, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        print(f"mlflow_ui_check: Chromium did not finish {png.name} within 300 s; its checks fail", flush=True)
        return ""
    return dom.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, help="an existing SQLite store (default: a small search in a fresh home)")
    ap.add_argument("--search", default="ui-check", help="the search to show (name of its parent run)")
    ap.add_argument("--experiment", default="latnas")
    ap.add_argument("--out", type=Path, help="folder for the screenshots")
    args = ap.parse_args()
    chromium = _chromium()

    home = Path(tempfile.mkdtemp(prefix="latnas-ui-")) if args.store is None else args.store.parent
    store = args.store.resolve() if args.store else _small_search(home, args.search)
    out = (args.out or home / "ui-check").resolve()
    out.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{store}"

    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(args.experiment)
    if exp is None:
        sys.exit(f"mlflow_ui_check: no experiment {args.experiment!r} in {store}")
    runs = client.search_runs([exp.experiment_id], max_results=5000)
    parent = next((r for r in runs if r.info.run_name == args.search and "mlflow.parentRunId" not in r.data.tags), None)
    if parent is None:
        sys.exit(f"mlflow_ui_check: no search {args.search!r} in {store}")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    top = sorted((c for c in children if "reward" in c.data.metrics), key=lambda c: -c.data.metrics["reward"])[:3]

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    print(f"mlflow_ui_check: starting `mlflow ui` at {base} for {store} ...", flush=True)
    checks: list[tuple[str, bool, str]] = []
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                sys.exit("mlflow_ui_check: `mlflow ui` did not start within 300 s")
            time.sleep(1)

        from nas.adapters.mlflow_writer import StoreWriter

        dom = _render(chromium, f"{base}/#/experiments/{exp.experiment_id}", out / "1-experiment-plain-link.png")
        checks.append(("(for comparison) the experiment's plain link opens the GenAI overview, not the runs",
                       "Traces" in dom, "MLflow's default, whatever the experiment's kind tag says"))

        link = StoreWriter(uri, args.experiment).ui_link(parent.info.run_id, base)
        dom = _render(chromium, link, out / "2-candidates-by-reward.png")
        ranked = sorted((c for c in children if "reward" in c.data.metrics), key=lambda c: -c.data.metrics["reward"])
        names = [c.info.run_name for c in ranked if c.info.run_name]
        where = [dom.find(n) for n in names]
        checks.append(("the printed link lists the search's candidates by descriptive names",
                       bool(names) and all(i >= 0 for i in where) and all(" acc " in n and " ms" in n for n in names),
                       f"{sum(i >= 0 for i in where)} of {len(names)} shown, e.g. {names[:2]}"))
        checks.append(("best reward first", all(i >= 0 for i in where) and where == sorted(where),
                       f"rewards {[round(c.data.metrics['reward'], 4) for c in ranked]}"))
        others = [r.info.run_name for r in runs if r.info.run_name and r.data.tags.get("mlflow.parentRunId")
                  not in (None, parent.info.run_id)]
        checks.append(("only this search's candidates", not any(n in dom for n in others),
                       f"{len(others)} candidates of other searches in the store, none shown"))

        artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
        table = "leaderboard_table.json"
        checks.append(("the parent run carries the leaderboard as an MLflow table", table in artifacts,
                       ", ".join(sorted(artifacts))))
        dom = _render(chromium, f"{base}/#/experiments/{exp.experiment_id}/runs/{parent.info.run_id}/artifacts/"
                      f"{table}", out / "3-leaderboard-table.png")
        shown_ids = [c.data.params["arch_id"] for c in top if c.data.params["arch_id"] in dom]
        checks.append(("the artifact view renders the leaderboard table", len(shown_ids) == len(top) > 0,
                       f"arch_ids of the top {len(top)} shown: {shown_ids}"))

        ids = json.dumps([c.info.run_id for c in top])
        dom = _render(chromium, f"{base}/#/compare-runs?runs={urllib.parse.quote(ids)}"
                      f"&experiments={urllib.parse.quote(json.dumps([exp.experiment_id]))}", out / "4-compare.png")
        checks.append(("the compare view of the top candidates renders", "reward" in dom
                       and all(c.info.run_name in dom for c in top), f"{len(top)} runs"))
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()

    for what, ok, detail in checks:
        print(f"{'ok  ' if ok else 'FAIL'} {what} ({detail})")
    print(f"screenshots: {out}")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
