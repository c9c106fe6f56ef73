"""Open a search's record in the real MLflow UI with headless Chromium, screenshot it, check what shows.

    python scripts/mlflow_ui_check.py                      # a small search in a fresh home, then the UI
    python scripts/mlflow_ui_check.py --store /abs/.latnas/mlflow.db --search <name>   # an existing store
    python scripts/mlflow_ui_check.py --out ui-shots       # where the screenshots go (default: <home>/ui-check)

What a user sees without touching any setting, in a fresh browser profile with a 1600 x 1000 px
page, read from the rendered page through chromedriver (WebDriver) and saved as PNG screenshots:

1. for comparison, the experiment's plain link, which MLflow 3.17 opens in its GenAI overview
   whatever the experiment's kind tag says (one GenAI / model-training switch for all experiments);
2. the link the search prints (``StoreWriter.ui_link``) opens the model-training runs table with
   the search's candidates only, best reward first, ``reward``, ``accuracy``, ``latency_p50``,
   ``meets_target`` and ``params_m`` as columns inside the page, each run name whole, and the
   figures as recorded (5 significant digits);
3. the second printed link (``ui_link(..., charts=True)``) opens the same runs in chart mode,
   reward and accuracy against latency p50 first;
4. a candidate's run page, opened from the table, shows its figures (in MLflow's GenAI mode until
   "Model training" is clicked once in the side bar, which the browser then keeps);
5. the parent run carries the leaderboard as an MLflow table (``leaderboard_table.json``), which
   the artifact view renders;
6. the compare page of the top candidates (tick them, "Compare") renders.

Chromium talks to 127.0.0.1 only (every host name resolves nowhere). Needs Chromium and its
WebDriver (Debian: ``apt-get install chromium chromium-driver``; ``$CHROMIUM`` and
``$CHROMEDRIVER`` name other binaries) and MLflow's UI (``mlflow ui``, part of the ``mlflow``
package). Exit status 0 when every check holds.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SMALL_SEARCH = [
    "+space=tiny", "target_ms=5", "search.n_trials=6", "data.max_train_samples=256", "data.max_val_samples=128",
    "train.epochs=1", "latency.input_shape=[1,3,64,64]", "latency.measure.min_runs=10",
    "latency.measure.min_time_s=0.05", "latency.measure.max_time_s=0.5", "latency.measure.max_repeats=1",
    "progress=false",
]
WIDTH, HEIGHT = 1600, 1000
WAIT_S = 180  # a page's data can take this long on a loaded 2-core machine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary(env: str, names: tuple[str, ...], package: str) -> str:
    for name in (os.environ.get(env, ""), *names):
        if name and shutil.which(name):
            return str(shutil.which(name))
    sys.exit(f"mlflow_ui_check: no {names[0]} found (apt-get install {package}, or set ${env})")


def _small_search(home: Path, name: str) -> Path:
    print(f"mlflow_ui_check: running a small search ({name}) in {home} ...", flush=True)
    env = dict(os.environ, LATNAS_HOME=str(home))
    subprocess.run([sys.executable, "-m", "nas.search", *SMALL_SEARCH, f"name={name}"], cwd=ROOT, env=env,
                   check=True, timeout=1800)
    return home / "mlflow.db"


class Browser:
    """Headless Chromium driven through chromedriver's W3C WebDriver HTTP API (no client library)."""

    def __init__(self, chromium: str, chromedriver: str, profile: Path) -> None:
        port = _free_port()
        self.driver = subprocess.Popen([chromedriver, f"--port={port}", "--allowed-ips=127.0.0.1"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.base = f"http://127.0.0.1:{port}"
        self.session = ""
        deadline = time.monotonic() + 60
        while True:
            try:
                self._call("GET", "/status")
                break
            except OSError:
                if time.monotonic() > deadline or self.driver.poll() is not None:
                    self.close()
                    sys.exit("mlflow_ui_check: chromedriver did not start within 60 s")
                time.sleep(0.2)
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--hide-scrollbars", f"--user-data-dir={profile}",
                f"--window-size={WIDTH},{HEIGHT}", "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"]
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome",
                                                 "goog:chromeOptions": {"binary": chromium, "args": args}}}}
        self.session = self._call("POST", "/session", caps)["sessionId"]
        # the page itself is WIDTH x HEIGHT px, whatever the headless window's frame takes
        self.do("POST", "/goog/cdp/execute", {"cmd": "Emulation.setDeviceMetricsOverride", "params": {
            "width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False}})

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=WAIT_S + 60) as resp:
                return json.loads(resp.read() or b"{}").get("value")
        except urllib.error.HTTPError as err:
            raise RuntimeError(f"WebDriver {method} {path}: {err.read()[:500]!r}") from None

    def do(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return self._call(method, f"/session/{self.session}{path}", body)

    def open(self, url: str) -> None:
        self.do("POST", "/url", {"url": url})

    def js(self, script: str, *args: Any) -> Any:
        return self.do("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait(self, what: str, script: str, *args: Any) -> Any:
        """Poll ``script`` until it returns something truthy (the page renders its data when it arrives)."""
        deadline = time.monotonic() + WAIT_S
        while True:
            value = self.js(script, *args)
            if value or time.monotonic() > deadline:
                if not value:
                    print(f"mlflow_ui_check: waited {WAIT_S} s for {what}; its checks fail", flush=True)
                return value
            time.sleep(0.5)

    def screenshot(self, png: Path) -> None:
        time.sleep(1)  # let the last data settle into the picture
        png.write_bytes(base64.b64decode(self.do("GET", "/screenshot")))
        print(f"mlflow_ui_check: saved {png.name}", flush=True)

    def close(self) -> None:
        if self.session:
            with contextlib.suppress(OSError, RuntimeError):
                self._call("DELETE", f"/session/{self.session}")
        self.driver.terminate()
        try:
            self.driver.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.driver.kill()


# What the runs table shows: its headers (with where they are) and its rows, top to bottom.
TABLE_JS = """
const area = document.querySelector('.ag-root-wrapper');
if (!area || !document.querySelector('.ag-row')) return null;
const box = area.getBoundingClientRect();
const headers = {};
for (const h of document.querySelectorAll('.ag-header-cell[col-id]')) {
  const r = h.getBoundingClientRect();
  headers[h.getAttribute('col-id')] = {text: h.innerText.trim(), left: r.left, right: r.right};
}
const rows = [...document.querySelectorAll(
  '.ag-center-cols-container .ag-row, .ag-pinned-left-cols-container .ag-row')];
const byIndex = {};
for (const row of rows) {
  const i = row.getAttribute('row-index');
  const entry = byIndex[i] || (byIndex[i] = {top: row.getBoundingClientRect().top, cells: {}});
  for (const c of row.querySelectorAll('.ag-cell[col-id]')) {
    const link = c.querySelector('a');
    const el = link || c.querySelector('.ag-cell-value') || c;
    entry.cells[c.getAttribute('col-id')] = {text: (link || c).innerText.trim(), cut: el.scrollWidth > el.clientWidth,
                                             href: link ? link.getAttribute('href') : null};
  }
}
const ordered = Object.values(byIndex).sort((a, b) => a.top - b.top).map(e => e.cells);
return {left: box.left, right: Math.min(box.right, window.innerWidth), headers, rows: ordered};
"""
RUN_NAME = "attributes.`Run Name`"


def _table_checks(table: dict[str, Any] | None, ranked: list[Any], others: list[str]) -> list[tuple[str, bool, str]]:
    from nas.adapters.mlflow_writer import TABLE_METRICS
    from nas.core.record import figure

    if not table:
        return [("the printed link shows the runs table", False, "no table rendered")]
    names = [r.get(RUN_NAME, {}).get("text", "") for r in table["rows"]]
    scored = [c.info.run_name for c in ranked if "reward" in c.data.metrics]
    ok = names[: len(scored)] == scored and sorted(names) == sorted(c.info.run_name for c in ranked)
    checks = [("the printed link lists the search's candidates, best reward first", ok,
               f"shown {names[:3]}..., expected {scored[:3]}...")]
    checks.append(("only this search's candidates", not set(names) & set(others),
                   f"{len(others)} candidates of other searches in the store, none shown"))
    cols = {k: table["headers"].get(f"metrics.`{k}`") for k in TABLE_METRICS}
    inside = {k: h is not None and h["left"] >= table["left"] - 1 and h["right"] <= table["right"] + 1
              for k, h in cols.items()}
    where = ", ".join(f"{k} at {h['left']:.0f}-{h['right']:.0f} px" if h else f"{k} absent" for k, h in cols.items())
    checks.append((f"{', '.join(TABLE_METRICS)} are columns inside the page", all(inside.values()),
                   f"{where} (table {table['left']:.0f}-{table['right']:.0f} px)"))
    cut = [n for r, n in zip(table["rows"], names, strict=True) if r.get(RUN_NAME, {}).get("cut", True)]
    checks.append(("each run name is shown whole", bool(names) and not cut, f"cut: {cut}" if cut else
                   f"{len(names)} names, e.g. {names[0]!r}"))
    shown = [(r.get(f"metrics.`{k}`") or {}).get("text", "") for r in table["rows"] for k in TABLE_METRICS]
    wrong = [t for t in shown if t not in ("", "-") and not _is_recorded_figure(t, figure)]
    cut_figures = [(r.get(f"metrics.`{k}`") or {}).get("text") for r in table["rows"] for k in TABLE_METRICS
                   if (r.get(f"metrics.`{k}`") or {}).get("cut")]
    checks.append(("the figures read whole, with 5 significant digits", bool(shown) and not wrong and not cut_figures,
                   f"e.g. {shown[:len(TABLE_METRICS)]}" + (f"; not so: {wrong}" if wrong else "")
                   + (f"; cut: {cut_figures}" if cut_figures else "")))
    return checks


def _is_recorded_figure(text: str, figure: Callable[[float], float]) -> bool:
    try:
        v = float(text.replace(",", ""))
    except ValueError:
        return False
    return figure(v) == v


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, help="an existing SQLite store (default: a small search in a fresh home)")
    ap.add_argument("--search", default="ui-check", help="the search to show (name of its parent run)")
    ap.add_argument("--experiment", default="latnas")
    ap.add_argument("--out", type=Path, help="folder for the screenshots")
    args = ap.parse_args()
    chromium = _binary("CHROMIUM", ("chromium", "chromium-browser", "google-chrome"), "chromium")
    chromedriver = _binary("CHROMEDRIVER", ("chromedriver",), "chromium-driver")

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
    ranked = sorted((c for c in children if "reward" in c.data.metrics), key=lambda c: -c.data.metrics["reward"])
    ranked += [c for c in children if "reward" not in c.data.metrics]
    top = ranked[:3]
    others = [r.info.run_name for r in runs if r.info.run_name and r.data.tags.get("mlflow.parentRunId")
              not in (None, parent.info.run_id)]

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env=dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true"),
    )
    base = f"http://127.0.0.1:{port}"
    print(f"mlflow_ui_check: starting `mlflow ui` at {base} for {store} ...", flush=True)
    checks: list[tuple[str, bool, str]] = []
    profile = Path(tempfile.mkdtemp(prefix="latnas-ui-browser-"))
    browser: Browser | None = None
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

        browser = Browser(chromium, chromedriver, profile)
        browser.open(f"{base}/#/experiments/{exp.experiment_id}")
        genai = browser.wait("the plain link's page", "return document.body.innerText.includes('Traces')"
                                                      " && !document.querySelector('.ag-row')")
        browser.screenshot(out / "1-experiment-plain-link.png")
        checks.append(("(for comparison) the experiment's plain link opens the GenAI overview, not the runs",
                       bool(genai), "MLflow's default, whatever the experiment's kind tag says"))

        writer = StoreWriter(uri, args.experiment, create=False)
        link = writer.ui_link(parent.info.run_id, base)
        print(f"mlflow_ui_check: the printed link: {link}", flush=True)
        browser.open(link)
        wanted = len(ranked)
        table = browser.wait("the runs table", f"const t = (() => {{{TABLE_JS}}})();"
                                               f" return t && t.rows.length >= {wanted} ? t : null;")
        browser.screenshot(out / "2-candidates-table.png")
        checks += _table_checks(table, ranked, others)

        browser.open(writer.ui_link(parent.info.run_id, base, charts=True))
        titles = browser.wait("the charts", """
            const t = [...document.querySelectorAll('[data-testid="experiment-view-compare-runs-card"]')]
                .map(c => c.innerText.split('\\n')[0].trim());
            return t.length >= 2 ? t : null;""") or []
        browser.screenshot(out / "3-charts.png")
        first = ["latency_p50 vs. reward", "latency_p50 vs. accuracy"]
        checks.append(("the chart link shows reward, then accuracy, against latency first", titles[:2] == first,
                       f"first charts: {titles[:4]}"))

        best = ranked[0] if ranked else None
        href = ((table or {}).get("rows") or [{}])[0].get(RUN_NAME, {}).get("href") if table else None
        if best is not None and href:
            browser.open(f"{base}/{href}")
            reward = f"{best.data.metrics['reward']:g}" if "reward" in best.data.metrics else "reward"
            page = browser.wait("the run page", "const t = document.body.innerText;"
                                " return t.includes(arguments[0]) && t.includes(arguments[1]) ? t : null",
                                best.info.run_name, reward)
            browser.screenshot(out / "4-run-page.png")
            genai_page = bool(page) and "Evaluation runs" in page
            checks.append(("a candidate's run page, from the table, shows its figures", bool(page),
                           f"reward {reward}; the side bar in {'GenAI' if genai_page else 'model training'} mode"))
            # MLflow keeps the GenAI / model-training switch in the browser only once it is clicked
            clicked = browser.js("const b = [...document.querySelectorAll('[role=button], button')]"
                                 ".find(e => e.innerText.trim() === 'Model training'); if (b) b.click(); return !!b;")
            browser.wait("the switch", "return !document.body.innerText.includes('Evaluation runs')")
            browser.open(f"{base}/{href}")
            page = browser.wait("the run page again", "const t = document.body.innerText;"
                                " return t.includes(arguments[0]) && !t.includes('Evaluation runs') ? t : null",
                                best.info.run_name)
            browser.screenshot(out / "4b-run-page-after-the-switch.png")
            checks.append(("once \"Model training\" is clicked, run pages open in that mode", clicked and bool(page),
                           "the browser keeps the choice"))
        else:
            checks.append(("a candidate's run page, from the table, shows its figures", False, "no run link"))

        artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
        table_file = "leaderboard_table.json"
        checks.append(("the parent run carries the leaderboard as an MLflow table", table_file in artifacts,
                       ", ".join(sorted(artifacts))))
        browser.open(f"{base}/#/experiments/{exp.experiment_id}/runs/{parent.info.run_id}/artifacts/{table_file}")
        ids = [c.data.params["arch_id"] for c in top]
        shown_ids = browser.wait("the leaderboard table", "const t = document.body.innerText;"
                                 " const ids = arguments[0].filter(i => t.includes(i));"
                                 " return ids.length === arguments[0].length ? ids : null;", ids) or []
        browser.screenshot(out / "5-leaderboard-table.png")
        checks.append(("the artifact view renders the leaderboard table", len(shown_ids) == len(top) > 0,
                       f"arch_ids of the top {len(top)} shown: {shown_ids}"))

        run_ids = json.dumps([c.info.run_id for c in top])
        browser.open(f"{base}/#/compare-runs?runs={urllib.parse.quote(run_ids)}"
                     f"&experiments={urllib.parse.quote(json.dumps([exp.experiment_id]))}")
        names = [c.info.run_name for c in top]
        compared = browser.wait("the compare page", "const t = document.body.innerText;"
                                " return t.includes('latency_p50') && arguments[0].every(n => t.includes(n));", names)
        browser.screenshot(out / "6-compare.png")
        checks.append(("the compare page of the top candidates renders", bool(compared), f"{len(top)} runs"))
    finally:
        if browser is not None:
            browser.close()
        shutil.rmtree(profile, ignore_errors=True)
        os.killpg(server.pid, signal.SIGTERM)  # `mlflow ui` and the workers it started
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)

    for what, ok, detail in checks:
        print(f"{'ok  ' if ok else 'FAIL'} {what} ({detail})")
    print(f"screenshots: {out}")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
