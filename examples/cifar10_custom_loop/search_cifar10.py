"""Search a CIFAR-10 network trained by your own loop, with LatNAS's Python API.

    python search_cifar10.py --archive /path/to/cifar10-train-jpeg.tar.gz                 # 16 candidates, 3 epochs
    python search_cifar10.py --archive ... --trials 4 --epochs 1 --train-samples 2000    # a quick look

The archive is CIFAR-10's training images as an image folder (``train/<class>/*.jpg``, a folder or
a ``.tar.gz``); validation images are carved from it. The same search from the command line (run
in this folder, so that ``cifar_loop`` is found; it is sent to every Ray worker):

    python -m nas.search +space=mobile_cifar target_ms=1 latency.input_shape=[1,3,32,32] \\
        data=cifar10_jpeg data.path=/path/to/cifar10-train-jpeg.tar.gz \\
        accuracy=custom accuracy.fn=cifar_loop:evaluate +accuracy.options.lr=0.002 train.epochs=3
"""

from __future__ import annotations

import argparse

import cifar_loop

from nas.api import SearchResult, search


def main(argv: list[str] | None = None) -> SearchResult:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--archive", required=True, help="CIFAR-10's training images: an image folder or a .tar.gz of one")
    p.add_argument("--trials", type=int, default=16)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--train-samples", type=int, default=5000)
    p.add_argument("--val-samples", type=int, default=2000)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--target-ms", type=float, default=1.0)
    p.add_argument("--name", default=None)
    p.add_argument("--output-dir", default=None)
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any other setting of python -m nas.search (repeatable), e.g. --set search.scheduler=asha")
    args = p.parse_args(argv)
    result = search(
        space="mobile_cifar", target_ms=args.target_ms,
        evaluator=cifar_loop.evaluate, evaluator_options={"lr": args.lr, "batch_size": args.batch_size},
        data="cifar10_jpeg",
        overrides=[
            "~data_rungs", f"data.path={args.archive}", f"data.max_train_samples={args.train_samples}",
            f"data.max_val_samples={args.val_samples}", "latency.input_shape=[1,3,32,32]",
            f"train.epochs={args.epochs}", f"search.n_trials={args.trials}", "progress=false", *args.set,
        ],
        name=args.name, output_dir=args.output_dir, tracking_uri=args.tracking_uri,
    )
    best = result.best
    if best is not None:
        print(f"best: {best.arch} accuracy {best.accuracy:.3f} at {best.latency_p50:.3f} ms")
    return result


if __name__ == "__main__":
    main()
