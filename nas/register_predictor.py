"""Record a latency predictor and its dataset in MLflow, and register it in the model registry.

Usage::

    python -m nas.register_predictor --predictor predictor.json [--dataset DIR] [--register NAME]
        [--tracking-uri sqlite:////abs/path/mlflow.db] [--experiment latnas]

The predictor (``python -m latency_predictor.train``) and its dataset
(``python -m latency_predictor.collect``) are files on the target device; this puts them where
the searches' record is, under a run tagged ``latnas.role=predictor``, and (with ``--register``)
as a new version of a registered model. Loading a predictor never executes code from the file.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from latency_predictor.prediction.dataset import dataset_tracking_record
from latency_predictor.prediction.predictor import predictor_tracking_record
from nas.adapters.mlflow_writer import StoreWriter
from nas.core.errors import USER_ERRORS
from nas.core.paths import default_tracking_uri


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; 2 on expected errors."""
    p = argparse.ArgumentParser(prog="python -m nas.register_predictor", description=__doc__.splitlines()[0])
    p.add_argument("--predictor", required=True, help="the predictor JSON file")
    p.add_argument("--dataset", help="the dataset folder it was fitted on (logged beside it)")
    p.add_argument("--register", metavar="NAME", help="register the predictor as a version of this model")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///<cwd>/mlflow.db)")
    p.add_argument("--experiment", default="latnas", help="experiment name (default latnas)")
    args = p.parse_args(argv)
    try:
        files, params = predictor_tracking_record(args.predictor)
        dfiles, dparams = dataset_tracking_record(args.dataset) if args.dataset else ([], None)
        writer = StoreWriter(args.tracking_uri or default_tracking_uri(), args.experiment)
        name = f"predictor-{params.get('space', '')}-{str(params.get('predictor_digest', ''))[:8]}"
        run_id, version = writer.log_predictor(name, files, params, dfiles, dparams, args.register)
    except USER_ERRORS as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"recorded predictor {args.predictor} as run {run_id} in {writer.uri}")
    if version is not None:
        print(f"registered as {args.register!r} version {version}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
