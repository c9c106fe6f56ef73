"""Fault injection: make chosen trials fail on purpose, to test that the search survives them.

A test and benchmark facility, **off unless** ``$LATNAS_FAULTS`` is set in the environment of
the process that runs the search (the driver reads it once, prints a warning, tags the MLflow
parent run ``fault_injection`` and ships the plan to the trials with their context). The value
is a comma-separated list of faults ``<kind>[:<arg>]@<rate>``, plus an optional ``seed=<int>``:

    LATNAS_FAULTS="measure@0.2"                 # 20% of architectures: the measurement fails
    LATNAS_FAULTS="export@0.1,nan@0.1,seed=3"   # 10% cannot be exported, 10% diverge
    LATNAS_FAULTS="kill@0.25"                   # 25%: the trial's process is killed (SIGKILL) once
    LATNAS_FAULTS="hang:30@0.1"                 # 10% stall 30 s (FAILED if search.trial_timeout_s < 30)

Kinds, and what the trial then does:

* ``export``, ``engine``, ``measure``: raise :class:`latency_predictor.ExportError`,
  :class:`~latency_predictor.EngineBuildError` or :class:`~latency_predictor.MeasurementError`
  in place of the latency measurement (the errors a backend raises when these steps fail);
* ``nan``: the network's weights are set to NaN before training, so the training's own check
  raises :class:`~nas.core.errors.TrainingError`;
* ``oom``: an allocation no device can satisfy is attempted on the trial's device, a real
  out-of-memory error that the trial boundary turns into
  :class:`~nas.core.errors.TrialOutOfMemoryError`;
* ``hang:<seconds>``: the trial stalls that long before measuring, checking its time limit
  (``search.trial_timeout_s``) as it waits, so it fails with
  :class:`~nas.core.errors.TrialTimeoutError` when the limit is shorter;
* ``bug``: an untyped ``RuntimeError``, as a bug in LatNAS would raise: the search records
  the trial as crashed, stops and raises (a bug is never retried nor taken for a bad candidate);
* ``kill``: on its first attempt the trial's process kills itself with SIGKILL, as the
  operating system's out-of-memory killer or an operator would; a marker file in
  ``marker_dir`` (the search's ``<output_dir>/faults``, which every trial must see: one machine)
  makes the retry run normally, so the trial completes when ``search.max_retries`` >= 1;
* ``die``: the trial's process kills itself on every attempt, so the trial ends FAILED with
  ``TrialProcessDied`` once ``search.max_retries`` restarts are spent.

Which architectures are hit is deterministic: kind ``k`` hits the architecture whose
``sha256(f"{seed}:{k}:{arch_id}")``, read as a fraction of 2**64, is below the kind's rate
(:meth:`FaultPlan.hits`), so a test can tell the bad candidates from the good ones afterwards.
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

from latency_predictor import EngineBuildError, ExportError, LatencyError, MeasurementError
from nas.core.errors import FaultSpecError

ENV_VAR = "LATNAS_FAULTS"
KINDS = ("export", "engine", "measure", "nan", "oom", "hang", "kill", "die", "bug")
_LATENCY_ERRORS: dict[str, Callable[[str], LatencyError]] = {
    "export": ExportError, "engine": EngineBuildError, "measure": MeasurementError,
}
_FAILURE_TYPES = {
    "die": "TrialProcessDied", "bug": "TrialCrashed", "export": "ExportError", "engine": "EngineBuildError",
    "measure": "MeasurementError",
    "oom": "TrialOutOfMemoryError", "nan": "TrainingError",
}
_IMPOSSIBLE_BYTES = 1 << 62  # more than any host or GPU has


@dataclass(frozen=True)
class Fault:
    """One kind of fault and the share of architectures it hits.

    Attributes:
        kind: one of :data:`KINDS`.
        rate: share of architectures hit, in [0, 1].
        arg: the kind's argument (``hang``: seconds to stall).
    """

    kind: str
    rate: float
    arg: float | None = None


@dataclass(frozen=True)
class FaultPlan:
    """The faults to inject, parsed from ``$LATNAS_FAULTS``.

    Attributes:
        faults: the faults, in the order given.
        seed: changes which architectures each fault hits.
        marker_dir: folder of the ``kill`` markers (set by the driver to ``<output_dir>/faults``).
        spec: the specification as given.
    """

    faults: tuple[Fault, ...]
    seed: int = 0
    marker_dir: str | None = None
    spec: str = ""
    _by_kind: Mapping[str, Fault] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_kind", {f.kind: f for f in self.faults})

    @classmethod
    def parse(cls, spec: str) -> FaultPlan:
        """Parse a specification (see the module's docstring).

        Raises:
            FaultSpecError: an unknown kind, a rate outside [0, 1], a bad argument or seed.
        """
        faults: list[Fault] = []
        seed = 0
        for raw in (part.strip() for part in spec.split(",")):
            if not raw:
                continue
            if raw.startswith("seed="):
                try:
                    seed = int(raw[len("seed="):])
                except ValueError:
                    raise FaultSpecError(f"{ENV_VAR}: seed must be an integer, got {raw!r}") from None
                continue
            head, at, rate_text = raw.partition("@")
            kind, _, arg_text = head.partition(":")
            if not at or kind not in KINDS:
                raise FaultSpecError(
                    f"{ENV_VAR}: {raw!r} is not <kind>[:<arg>]@<rate> with a kind of {list(KINDS)}"
                )
            try:
                rate = float(rate_text)
                arg = float(arg_text) if arg_text else None
            except ValueError:
                raise FaultSpecError(f"{ENV_VAR}: {raw!r}: rate and argument must be numbers") from None
            if not 0.0 <= rate <= 1.0:
                raise FaultSpecError(f"{ENV_VAR}: {raw!r}: the rate must be in [0, 1]")
            if kind == "hang" and (arg is None or arg <= 0):
                raise FaultSpecError(f"{ENV_VAR}: {raw!r}: hang needs the seconds to stall, e.g. hang:30@0.1")
            if kind != "hang" and arg is not None:
                raise FaultSpecError(f"{ENV_VAR}: {raw!r}: {kind} takes no argument")
            if any(f.kind == kind for f in faults):
                raise FaultSpecError(f"{ENV_VAR}: {kind} is given twice")
            faults.append(Fault(kind, rate, arg))
        if not faults:
            raise FaultSpecError(f"{ENV_VAR}={spec!r} names no fault; unset it to inject none")
        return cls(tuple(faults), seed, None, spec)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> FaultPlan | None:
        """The plan in ``$LATNAS_FAULTS``; None when it is unset or empty (the default)."""
        spec = (os.environ if environ is None else environ).get(ENV_VAR, "").strip()
        return cls.parse(spec) if spec else None

    def with_marker_dir(self, folder: Path) -> FaultPlan:
        """This plan with its ``kill`` markers in ``folder`` (created)."""
        folder.mkdir(parents=True, exist_ok=True)
        return replace(self, marker_dir=str(folder))

    def hits(self, kind: str, arch_id: str) -> bool:
        """Whether fault ``kind`` hits the architecture ``arch_id``."""
        fault = self._by_kind.get(kind)
        if fault is None:
            return False
        digest = hashlib.sha256(f"{self.seed}:{kind}:{arch_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < fault.rate

    def expected_failure(self, arch_id: str, trial_timeout_s: float | None = None) -> str | None:
        """The failure type a trial of ``arch_id`` ends with because of this plan (None: none).

        ``kill`` is not a failure when retries are allowed; ``hang`` only past the time limit.
        """
        for kind in ("die", "hang", "bug", "export", "engine", "measure", "oom", "nan"):
            if not self.hits(kind, arch_id):
                continue
            if kind == "hang":
                if trial_timeout_s is not None and (self._by_kind["hang"].arg or 0.0) > trial_timeout_s:
                    return "TrialTimeoutError"
                continue
            return _FAILURE_TYPES[kind]
        return None

    # ------------------------------------------------------------------ in the trial
    def before_measure(self, arch_id: str, check_time: Callable[[str], None]) -> None:
        """Faults of the start of a trial: ``die``, ``kill``, ``hang``, ``bug``, then the latency errors.

        Args:
            arch_id: the trial's architecture.
            check_time: the trial's time-limit check, called while a ``hang`` stalls.

        Raises:
            LatencyError: ``export``, ``engine`` or ``measure`` hits this architecture.
            RuntimeError: ``bug`` hits it.
        """
        if self.hits("die", arch_id):
            os.kill(os.getpid(), signal.SIGKILL)
        if self.hits("kill", arch_id):
            self._kill_once(arch_id)
        if self.hits("hang", arch_id):
            until = time.perf_counter() + (self._by_kind["hang"].arg or 0.0)
            while time.perf_counter() < until:
                check_time("a stall injected by LATNAS_FAULTS")
                time.sleep(min(0.05, max(0.0, until - time.perf_counter())))
        if self.hits("bug", arch_id):
            raise RuntimeError(f"bug injected by {ENV_VAR} for architecture {arch_id}")
        for kind, error in _LATENCY_ERRORS.items():
            if self.hits(kind, arch_id):
                raise error(f"{kind} failure injected by {ENV_VAR} for architecture {arch_id}")

    def before_training(self, arch_id: str, model: nn.Module, device: torch.device) -> None:
        """Faults of the accuracy estimate: ``oom`` (a real failed allocation), ``nan`` (NaN weights)."""
        if self.hits("oom", arch_id):
            torch.empty(_IMPOSSIBLE_BYTES, dtype=torch.uint8, device=device)
        if self.hits("nan", arch_id):
            with torch.no_grad():
                for p in model.parameters():
                    p.fill_(float("nan"))

    def _kill_once(self, arch_id: str) -> None:
        if self.marker_dir is None:
            raise FaultSpecError(f"{ENV_VAR}: kill needs a marker folder (the driver sets <output_dir>/faults)")
        marker = Path(self.marker_dir) / f"kill-{arch_id}"
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # the retry: run normally
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)
