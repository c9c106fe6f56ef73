"""The user's own functions (``accuracy.fn``, ``data.fn``): found by ``module:function``, called, their
failures typed.

A reference ``my_pkg.my_module:evaluate`` is imported with :func:`importlib.import_module` (the
folder the search starts in comes first on the path, as for ``python -m``) and its attribute
looked up. Whatever goes wrong on the user's side becomes a
:class:`~nas.core.errors.UserCodeError` naming the setting, the reference and the cause: a module
that cannot be imported (or raises while it is), a missing or non-callable attribute, an exception
raised by the function. In a trial, that error FAILS the candidate and the search goes on; in the
driver's pre-flight call, it stops the search before any trial.

Two kinds of exception pass through untouched, because they are not the user's mistake to
report: LatNAS's own typed errors (the trial's time limit, raised from ``context.report``) and
running out of memory, which the trial boundary reports as such.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import site
import sys
import sysconfig
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from nas.core.errors import USER_ERRORS, UserCodeError

MAX_REASON = 600
"""The longest error text kept from the user's exception (its first lines are the useful ones)."""


def split_ref(ref: str) -> tuple[str, str]:
    """``"pkg.mod:fn"`` -> ``("pkg.mod", "fn")``."""
    module, _, attr = ref.partition(":")
    return module, attr


def _cause(err: BaseException) -> str:
    text = " ".join(str(err).split()) or "(no message)"
    return f"{type(err).__name__}: {text[:MAX_REASON]}"


def _where(err: BaseException) -> str:
    """Where in the user's own code ``err`` came from, as `` (at file:line in function)``: the innermost
    frame outside installed packages (torch's, numpy's) and LatNAS; the innermost frame when there is none."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return ""
    own = Path(__file__).resolve().parents[1]  # the nas package
    roots = _installed_roots()
    users = [f for f in frames if not _under(Path(f.filename), [*roots, own])]
    last = (users or frames)[-1]
    return f" (at {Path(last.filename).name}:{last.lineno} in {last.name})"


def _under(path: Path, roots: list[Path]) -> bool:
    try:
        resolved = path.resolve()
    except OSError:
        return False
    return any(resolved.is_relative_to(root) for root in roots)


def import_module(key: str, ref: str, from_cwd: bool = False) -> ModuleType:
    """The module of the reference ``ref`` (setting ``key``), imported.

    Args:
        key: the setting that names it, for messages.
        ref: ``module:function``.
        from_cwd: look in the current folder too (the driver: the folder the search starts in).
            ``python -m nas.search`` puts it on the path; a program that calls the Python API
            from another folder's script may not.

    Raises:
        UserCodeError: it cannot be found, or raised while it was imported.
    """
    module, _ = split_ref(ref)
    if from_cwd and "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name is not None and (module == err.name or module.startswith(err.name + ".")):
            raise UserCodeError(key, ref, f"no module named {err.name!r} here (looked in the folder the search "
                                "started in and the installed packages); check the name, start the search in "
                                "the folder that holds it, or install it") from None
        raise UserCodeError(key, ref, f"importing it failed: {_cause(err)}{_where(err)}; install that "
                            "package where the trials run, or list its module in ray.py_modules") from None
    except Exception as err:  # the user's module raised while it was executed: theirs to fix
        raise UserCodeError(key, ref, f"importing it raised {_cause(err)}{_where(err)}") from None


def load_function(key: str, ref: str, from_cwd: bool = False) -> Callable[..., Any]:
    """The function ``ref`` (``module:function``, setting ``key``) names (``from_cwd``: see :func:`import_module`).

    Raises:
        UserCodeError: the module cannot be imported, or has no such callable.
    """
    mod = import_module(key, ref, from_cwd)
    _, attr = split_ref(ref)
    obj: Any = mod
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            public = sorted(n for n, v in vars(mod).items() if callable(v) and not n.startswith("_"))
            shown = ", ".join(public[:12]) + (", ..." if len(public) > 12 else "")
            raise UserCodeError(key, ref, f"module {mod.__name__!r} ({getattr(mod, '__file__', '?')}) has no "
                                f"{attr!r}; it has: {shown or 'no public functions'}") from None
    if not callable(obj):
        raise UserCodeError(key, ref, f"{attr!r} is a {type(obj).__name__}, not a function")
    return obj


def _out_of_memory(err: BaseException) -> bool:
    # MemoryError, torch.OutOfMemoryError (a RuntimeError subclass named so) and the CPU allocator's
    # plain RuntimeError: the trial boundary turns these into TrialOutOfMemoryError.
    return (isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError"
            or (isinstance(err, RuntimeError) and "DefaultCPUAllocator: can't allocate memory" in str(err)))


def call(key: str, ref: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; an exception it raises becomes a :class:`UserCodeError`.

    LatNAS's own typed errors (raised through the context it was given) and running out of memory
    pass through as they are.

    Raises:
        UserCodeError: the function raised.
    """
    try:
        return fn(*args, **kwargs)
    except USER_ERRORS:
        raise
    except Exception as err:  # the user's code raised: a FAILED candidate with the reason, not a LatNAS bug
        if _out_of_memory(err):
            raise
        raise UserCodeError(key, ref, f"raised {_cause(err)}{_where(err)}") from err


def number(key: str, ref: str, value: Any, what: str) -> float:
    """``value`` as a finite float.

    Raises:
        UserCodeError: it is not a real number (a bool, a string, a tensor of several values), or not finite.
    """
    if isinstance(value, bool) or value is None:
        raise UserCodeError(key, ref, f"{what} must be a number, got {value!r}")
    item = getattr(value, "item", None)  # a one-element tensor or numpy scalar
    if callable(item) and not isinstance(value, int | float):
        try:
            value = item()
        except (ValueError, RuntimeError):
            raise UserCodeError(key, ref, f"{what} must be a single number, got a {type(value).__name__} of shape "
                                f"{tuple(getattr(value, 'shape', ()))}") from None
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise UserCodeError(key, ref, f"{what} must be a number, got a {type(value).__name__}: "
                            f"{str(value)[:80]!r}") from None
    if not math.isfinite(out):
        raise UserCodeError(key, ref, f"{what} must be finite, got {out}")
    return out


def mapping(value: Any) -> Mapping[str, Any] | None:
    """``value`` when it is a mapping (a dict-like result), else None."""
    return value if isinstance(value, Mapping) else None


# ---------------------------------------------------------------------- shipping the user's code

SHIP_LIMIT_MB = 100.0
"""The most a module or package sent to every node may hold (Ray refuses packages past the size of
its largest message: 100 MiB in older releases, 512 MiB in 2.60; the smaller bound holds for both)."""
OWN_PACKAGES = ("nas", "search_spaces", "latency_predictor")
"""LatNAS itself: installed on every node of a cluster, never sent."""


def _installed_roots() -> list[Path]:
    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(site.getsitepackages())
    paths.add(site.getusersitepackages())
    return [Path(p).resolve() for p in paths if p]


def _installed(path: Path) -> bool:
    return _under(path, _installed_roots())


def _size_mb(path: Path) -> float:
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file() and "__pycache__" not in f.parts]
    return sum(f.stat().st_size for f in files) / 2**20


def module_source(module: str) -> Path | None:
    """What to send so that ``module`` imports elsewhere: its top-level package's folder, or the file of a
    single-file module; None when there is nothing to send (LatNAS itself, an installed package, a
    built-in module, or a module Python cannot find here)."""
    top = module.split(".")[0]
    if top in OWN_PACKAGES:
        return None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    if len(locations) == 1:
        path = Path(locations[0])
    elif spec.origin and spec.origin not in ("built-in", "frozen") and not locations:
        path = Path(spec.origin)
    else:
        return None  # a namespace package spread over several folders, or a built-in: nothing one copy could hold
    return None if _installed(path) else path


def ship_paths(key_refs: Mapping[str, str], extra: list[str]) -> list[Path]:
    """The files and folders to send to every node: the packages (or single files) of the user's
    functions (``key_refs``: setting -> ``module:function``), and ``extra`` (``ray.py_modules``:
    module names or paths), none installed, each once.

    Raises:
        UserCodeError: an ``extra`` entry that is neither a path nor a module found here, or a package too
            big to send.
    """
    out: dict[Path, str] = {}
    for key, ref in key_refs.items():
        path = module_source(split_ref(ref)[0])
        if path is not None:
            out.setdefault(path.resolve(), f"{key}={ref}")
    for i, item in enumerate(extra):
        key = f"ray.py_modules[{i}]"
        given = Path(item).expanduser()
        if given.exists():
            if given.is_file() and given.suffix != ".py":
                raise UserCodeError(key, item, "a path to send must be a .py file or a package folder")
            out.setdefault(given.resolve(), f"{key}={item}")
            continue
        found = module_source(item)
        if found is None:
            raise UserCodeError(key, item, "is neither a path nor a module found here that is not installed (an "
                                "installed package must be installed on every node instead)")
        out.setdefault(found.resolve(), f"{key}={item}")
    for path, origin in out.items():
        size = _size_mb(path)
        if size > SHIP_LIMIT_MB:
            key, _, ref = origin.partition("=")
            raise UserCodeError(key, ref, f"{path} holds {size:.0f} MiB; what is sent to every node must stay under "
                                f"{SHIP_LIMIT_MB:.0f} MiB: keep data and checkpoints out of the package (read them "
                                "from a path every node sees), or install the package on every node and set "
                                "ray.ship_code=false")
    return list(out)
