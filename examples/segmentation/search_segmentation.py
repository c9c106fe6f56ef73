"""Search a segmentation backbone with LatNAS's Python API: your own space, data and evaluator.

    python search_segmentation.py            # 12 candidates, 3 epochs each, a 1 ms target on this CPU
    python search_segmentation.py --trials 3 --epochs 2 --n-train 64 --n-val 32 --batch-size 8 --lr 0.01

The same search from the command line (run in this folder; the space file is found through
Hydra's search path):

    python -m nas.search hydra.searchpath=[file://$PWD] +space=seg_tiny target_ms=1 \\
        latency.input_shape=[1,3,32,32] data=custom data.fn=shapes:datasets \\
        accuracy=custom accuracy.fn=shapes:evaluate train.epochs=3 search.n_trials=12

``shapes.py`` only exists in this folder: the search sends it to every Ray worker (ray.ship_code).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import shapes

from nas.api import SearchResult, search

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> SearchResult:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--n-train", type=int, default=512)
    p.add_argument("--n-val", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--target-ms", type=float, default=1.0)
    p.add_argument("--name", default=None)
    p.add_argument("--output-dir", default=None)
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any other setting of python -m nas.search (repeatable), e.g. --set search.scheduler=asha")
    args = p.parse_args(argv)
    result = search(
        space=HERE / "space" / "seg_tiny.yaml", target_ms=args.target_ms,
        evaluator=shapes.evaluate, evaluator_options={"lr": args.lr, "batch_size": args.batch_size},
        data=shapes.datasets, data_options={"n_train": args.n_train, "n_val": args.n_val, "size": 32},
        overrides=[
            "latency.input_shape=[1,3,32,32]", f"train.epochs={args.epochs}", f"search.n_trials={args.trials}",
            "search.max_concurrent=2", "progress=false", *args.set,
        ],
        name=args.name, output_dir=args.output_dir, tracking_uri=args.tracking_uri,
    )
    best = result.best
    if best is not None:
        print(f"best: {best.arch} IoU {best.accuracy:.3f} at {best.latency_p50:.3f} ms")
    return result


if __name__ == "__main__":
    main()
