"""``python -m nas.supernet +space=... data=...``: train a weight-sharing supernet over a search space.

The command line is :func:`nas.cli.supernet_main`; the training is :func:`nas.oneshot.train.run_supernet`.
Data-parallel on several GPUs or processes: ``torchrun --nproc_per_node=N -m nas.supernet ...``.
"""

from __future__ import annotations

from nas.cli import supernet_main

if __name__ == "__main__":
    supernet_main()
