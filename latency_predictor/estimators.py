"""Latency estimators from plain configuration values, as the search's ``latency`` group gives them.

The estimator wiring: the one module that joins measurement (:mod:`latency_predictor.measurement`),
the measurement agents (:mod:`latency_predictor.agent`) and prediction
(:mod:`latency_predictor.prediction`). :func:`make_latency_estimator` is the one place that turns
a backend name, an input shape and option mappings into a :class:`~latency_predictor.LatencyEstimator`:

* a measuring backend (``onnxruntime``, ``torch``, ``tensorrt``: :func:`make_estimator`);
* ``predictor``: a learned latency predictor (:class:`PredictorOptions`). Every candidate's
  latency is predicted. The predictor must have been trained for this space (same definition),
  input shape, classifier width and the statistic the target bounds (``target_stat``: a p99
  target takes a predictor trained with ``--statistic p99``); with ``device`` set, also for that
  device (a CPU or GPU model name, or the predictor's fingerprint digest). Anything else is
  refused before the first trial with the differences named. This is the mode for searching
  anywhere (a cluster of GPUs) for a device elsewhere (one CPU, a Jetson): collect and train on
  the target, search with the file.
* ``predictor`` with ``hybrid=true``: :class:`~latency_predictor.prediction.hybrid.HybridEstimator`,
  which confirms the candidates that matter by real measurement on this machine. The measuring
  backend's device fingerprint must equal the predictor's: confirmations from another device
  would corrupt the dataset. Confirmations are timed with the search's protocol
  (``latency.measure``, overridden by ``measure_options.measure``) raised to the runs the
  statistic needs (:func:`~latency_predictor.measurement.statistic.protocol_for`), so that they
  measure the statistic the predictor predicts.
* ``remote``: every candidate is measured on another device by measurement agents
  (:class:`~latency_predictor.agent.client.RemoteEstimator`, :class:`RemoteOptions`), with the
  backend, options and protocol a local measurement would use there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from latency_predictor.agent.client import RemoteEstimator
from latency_predictor.agent.wire import TOKEN_ENV, read_token
from latency_predictor.errors import ConfigError, PredictorMismatchError
from latency_predictor.measurement.backends import MeasuredBackend, make_estimator
from latency_predictor.measurement.fingerprint import DeviceFingerprint
from latency_predictor.measurement.protocol import LatencyEstimator
from latency_predictor.measurement.statistic import check_stat, protocol_for
from latency_predictor.prediction.hybrid import HybridEstimator, HybridOptions, current_predictor_path
from latency_predictor.prediction.predictor import PredictorEstimator, check_statistic, read_predictor
from latency_predictor.prediction.target import PredictorTarget, space_digest
from search_spaces import SearchSpace


def make_latency_estimator(
    backend: str,
    input_shape: Sequence[int],
    options: Mapping[str, Any],
    measure: Mapping[str, Any],
    num_classes: int,
    space: SearchSpace | None = None,
    target_ms: float | None = None,
    precision: str = "fp32",
    target_stat: str = "p50",
) -> LatencyEstimator:
    """The estimator the ``latency`` settings describe, for networks with ``num_classes`` outputs.

    Args:
        backend: a measuring backend's name, ``predictor`` or ``remote``.
        input_shape: the deployment shape, batch first.
        options: the backend's (or the predictor's) options.
        measure: measurement protocol settings (measuring backends, and hybrid mode's confirmations).
        num_classes: classifier width of the measured networks.
        space: the search space, for estimators bound to one (a learned predictor).
        target_ms: the latency target (hybrid mode confirms candidates near it).
        precision: the deployment precision (``latency.precision``): what a measuring backend
            (local or through agents) runs at, and what a predictor must have been trained at.
        target_stat: the statistic the target bounds (:mod:`latency_predictor.measurement.statistic`): a
            measuring protocol gets the timed runs it needs; a predictor must predict it
            (``python -m latency_predictor.train --statistic``).

    Raises:
        LatencyError: unknown backend or option, invalid value, a precision the backend cannot
            run, backend not available here, a predictor made for another setting (statistic included).
    """
    check_stat(target_stat)
    measure = protocol_for(target_stat, measure)
    if backend == "remote":
        return make_remote_estimator(tuple(input_shape), options, measure, num_classes, precision)
    if backend == "predictor":
        if space is None:
            raise ConfigError("latency=predictor needs the search space its predictor was trained for")
        return make_predictor_estimator(tuple(input_shape), options, num_classes, space, target_ms, precision,
                                        measure, target_stat)
    opts = dict(options)
    _no_precision_option(opts, "latency.options")
    opts.setdefault("num_classes", num_classes)
    return make_estimator(backend, input_shape=list(input_shape), measure=dict(measure), precision=precision, **opts)


def measuring_part(estimator: LatencyEstimator) -> LatencyEstimator | None:
    """What measures for ``estimator``: itself (a measuring backend, measurement agents), hybrid mode's
    measuring backend, or None for a predictor alone (it measures nothing).

    An anchor network paired with a candidate is measured with it: a prediction of the anchor would
    compare two predictions, which a drifting host does not move.
    """
    if isinstance(estimator, HybridEstimator):
        return cast(LatencyEstimator, estimator.backend)
    if isinstance(estimator, PredictorEstimator):
        return None
    return estimator


_Options = TypeVar("_Options", "PredictorOptions", "RemoteOptions")


def _parse(cls: type[_Options], options: Mapping[str, Any], backend: str, required: str, what: str) -> _Options:
    """``cls`` from ``latency.options``: an unknown key, or a missing ``required`` one (``what`` it
    is), is refused by name; a null value takes the default.

    Raises:
        ConfigError: naming the unknown or missing key.
    """
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ConfigError(f"latency.options.{unknown[0]}: unknown for latency={backend}; known: {known}")
    if not options.get(required):
        raise ConfigError(f"latency.options.{required}: required for latency={backend}: {what}")
    return cls(**{k: v for k, v in options.items() if v is not None})


def _no_precision_option(options: Mapping[str, Any], where: str) -> None:
    """The precision has one place, ``latency.precision``; a second one among the options is refused."""
    if "precision" in options:
        raise ConfigError(
            f"{where}.precision: the precision is set in one place, latency.precision (e.g. latency.precision="
            f"{options['precision']}); remove it from {where}"
        )


@dataclass(frozen=True)
class PredictorOptions(HybridOptions):
    """``latency.options`` of ``latency=predictor``: the predictor file and hybrid mode's settings
    (:class:`~latency_predictor.prediction.hybrid.HybridOptions`), and these.

    Attributes:
        device: the device the search must target (a substring of the predictor's CPU/GPU
            model, or its fingerprint digest); None: the predictor's own device, printed.
        measure_backend: the backend confirming measurements use (hybrid).
        measure_options: that backend's options (hybrid), e.g. ``{intra_op_threads: 1}``; a
            ``measure`` mapping among them overrides the search's protocol settings for confirmations.
    """

    device: str | None = None
    measure_backend: str = "onnxruntime"
    measure_options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> PredictorOptions:
        """Check and build from ``latency.options``.

        Raises:
            ConfigError: naming the unknown, missing or invalid key.
        """
        opts = _parse(cls, options, "predictor", "path",
                      "the file written by `python -m latency_predictor.train --out FILE`")
        if not Path(opts.path).is_file():
            raise ConfigError(f"latency.options.path: no predictor file at {opts.path!r}")
        if opts.hybrid and not opts.dataset:
            raise ConfigError("latency.options.dataset: hybrid mode needs the predictor's dataset folder")
        if opts.dataset and not Path(opts.dataset).is_dir():
            raise ConfigError(f"latency.options.dataset: no dataset folder at {opts.dataset!r}")
        if not opts.confirm_uncertain_rel > 0:
            raise ConfigError("latency.options.confirm_uncertain_rel: must be > 0")
        if opts.refit_every < 0:
            raise ConfigError("latency.options.refit_every: must be >= 0")
        if opts.pareto_band is not None and not 0 <= opts.pareto_band < 1:
            raise ConfigError(f"latency.options.pareto_band: must be in [0, 1) or null, not {opts.pareto_band}")
        return opts


def make_predictor_estimator(
    input_shape: tuple[int, ...], options: Mapping[str, Any], num_classes: int, space: SearchSpace,
    target_ms: float | None = None, precision: str = "fp32", measure: Mapping[str, Any] | None = None,
    target_stat: str = "p50",
) -> LatencyEstimator:
    """The estimator ``latency=predictor`` describes, checked against what the search needs.

    Args:
        input_shape: the deployment shape, batch first.
        options: ``latency.options`` (:class:`PredictorOptions`).
        num_classes: classifier width of the searched networks.
        space: the search space the predictor must have been trained for.
        target_ms: the latency target (hybrid mode confirms candidates near it).
        precision: the deployment precision the predictor must have been trained at.
        measure: the protocol settings hybrid mode's confirmations are timed with.
        target_stat: the statistic the predictor must predict; hybrid confirmations are timed
            with enough runs for it (:func:`~latency_predictor.measurement.statistic.protocol_for`).

    Raises:
        ConfigError: bad options, an unknown ``target_stat``.
        PredictorFileError: the file cannot be read or has unexpected content.
        PredictorMismatchError: the predictor was trained for another space, input shape,
            classifier width, precision, device or statistic; the message names every difference.
        BackendUnavailableError: hybrid mode's measuring backend cannot run here.
    """
    check_stat(target_stat)
    opts = PredictorOptions.parse(options)
    path = current_predictor_path(opts)
    pred = read_predictor(path)
    check_statistic(pred, target_stat, path)
    if opts.hybrid:
        backend = _measuring_backend(opts, input_shape, num_classes, measure, precision, target_stat)
        pred.target.check(PredictorTarget.create(space, backend), what="predictor")
        pred.space = space
        return HybridEstimator(pred, backend, opts, target_ms)
    # The predictor's own device unless latency.options.device insists (below); the precision is the search's.
    fingerprint = dataclasses.replace(pred.target.fingerprint, precision=precision)
    expected = PredictorTarget(space.name, space_digest(space), fingerprint, tuple(input_shape), num_classes)
    pred.target.check(expected, what="predictor")
    if opts.device is not None:
        fp = pred.target.fingerprint
        described = [fp.digest, *fp.environment.values()]
        if not any(opts.device.lower() in d.lower() for d in described):
            raise PredictorMismatchError(
                f"latency.options.device={opts.device!r} but the predictor was trained on {describe_device(pred)}"
            )
    pred.space = space
    return cast(LatencyEstimator, pred)


def predictor_measuring_backend(
    input_shape: Sequence[int], options: Mapping[str, Any], num_classes: int, measure: Mapping[str, Any] | None = None,
    precision: str = "fp32", target_stat: str = "p50",
) -> LatencyEstimator:
    """A measuring backend of this machine that times networks the way ``latency=predictor``'s predictor was made.

    For figures that sit beside a predictor's (reference networks outside the predictor's space,
    for example): the backend is ``latency.options.measure_backend`` with its ``measure_options``,
    and this machine must be the device the predictor was trained for. The protocol ``measure``
    gets the timed runs ``target_stat`` needs (:func:`~latency_predictor.measurement.statistic.protocol_for`).

    Raises:
        ConfigError: bad options.
        PredictorFileError: the predictor file cannot be read.
        PredictorMismatchError: this machine or backend is not the predictor's, every difference named.
        BackendUnavailableError: the measuring backend cannot run here.
    """
    opts = PredictorOptions.parse(options)
    pred = read_predictor(current_predictor_path(opts))
    backend = _measuring_backend(opts, input_shape, num_classes, measure, precision, target_stat)
    here = DeviceFingerprint.of_estimator(backend)
    diffs = here.differences(pred.target.fingerprint, there="in the predictor")
    if diffs:
        raise PredictorMismatchError(
            f"the predictor was made for {describe_device(pred)}; measuring here would not give comparable "
            f"figures ({'; '.join(diffs)}): run this on that device (or set latency.options.measure_backend/"
            "measure_options to what the predictor was measured with)"
        )
    return backend


def _measuring_backend(
    opts: PredictorOptions, input_shape: Sequence[int], num_classes: int, measure: Mapping[str, Any] | None,
    precision: str, target_stat: str,
) -> MeasuredBackend:
    """``measure_backend`` with its ``measure_options``, timing with the search's protocol ``measure``
    (overridden by ``measure_options.measure``) raised to the runs ``target_stat`` needs."""
    _no_precision_option(opts.measure_options, "latency.options.measure_options")
    backend_opts = dict(opts.measure_options)
    protocol = {**dict(measure or {}), **dict(backend_opts.pop("measure", None) or {})}
    return make_estimator(opts.measure_backend, input_shape=list(input_shape), num_classes=num_classes,
                          precision=precision, measure=protocol_for(target_stat, protocol), **backend_opts)


def describe_device(pred: PredictorEstimator) -> str:
    """The predictor's device in words (backend, device, precision, CPU/GPU model, digest)."""
    fp = pred.target.fingerprint
    model = fp.environment.get("gpu") or fp.environment.get("cpu_model") or fp.environment.get("device_name") or "?"
    return f"{fp.backend} {fp.precision} on {fp.device} ({model}; fingerprint {fp.digest})"


@dataclass(frozen=True)
class RemoteOptions:
    """``latency.options`` of ``latency=remote``.

    Attributes:
        url: an agent's ``http://HOST:PORT``, or a list of them: a pool of identical devices.
        backend: the measuring backend the agents use (``onnxruntime``, ``torch``, ``tensorrt``).
        backend_options: its options, as for a local measurement (e.g. ``{intra_op_threads: 1}``).
        token_env: the environment variable holding the agents' token.
        token_file: a file holding the token instead (e.g. on a file system every node sees).
        timeout_s: longest wait for one agent's reply before trying the next agent.
        connect_timeout_s: longest wait for a connection.
        down_s: how long an agent that failed is tried last.
    """

    url: str | list[str]
    backend: str = "onnxruntime"
    backend_options: dict[str, Any] = field(default_factory=dict)
    token_env: str = TOKEN_ENV
    token_file: str | None = None
    timeout_s: float = 900.0
    connect_timeout_s: float = 5.0
    down_s: float = 60.0

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> RemoteOptions:
        """Check and build from ``latency.options``.

        Raises:
            ConfigError: naming the unknown, missing or invalid key.
        """
        if "token" in options:
            raise ConfigError(
                "latency.options.token: not taken, because the search records its configuration (MLflow params, "
                f"config.yaml); put the token in ${TOKEN_ENV} (or latency.options.token_env / token_file)"
            )
        opts = _parse(cls, options, "remote", "url", "the http://HOST:PORT of an agent "
                      "(python -m latency_predictor.agent on the device), or a list of them for a pool")
        if not isinstance(opts.backend_options, Mapping):
            raise ConfigError("latency.options.backend_options: must be a mapping of the backend's options")
        return opts


def make_remote_estimator(
    input_shape: tuple[int, ...], options: Mapping[str, Any], measure: Mapping[str, Any], num_classes: int,
    precision: str = "fp32",
) -> RemoteEstimator:
    """The estimator ``latency=remote`` describes; no agent is asked yet (its ``environment()`` asks them all).

    Raises:
        ConfigError: bad options, no token, an unknown backend option or protocol setting.
    """
    opts = RemoteOptions.parse(options)
    _no_precision_option(opts.backend_options, "latency.options.backend_options")
    token = read_token(opts.token_env, opts.token_file, file_setting="latency.options.token_file",
                       other_ways=" to the token the agents were started with (or give latency.options.token_file"
                                  " / token_env)")
    return RemoteEstimator(
        opts.url, token=token, backend=opts.backend, backend_options={**opts.backend_options, "precision": precision},
        input_shape=input_shape,
        num_classes=num_classes, measure=measure, timeout_s=opts.timeout_s, connect_timeout_s=opts.connect_timeout_s,
        down_s=opts.down_s,
    )
