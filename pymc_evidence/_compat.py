"""Every difference between the two supported stacks, in one place.

Python 3.11: PyMC 5 / PyTensor 2 / ArviZ 0.x (``InferenceData``).
Python 3.12+: PyMC 6 / PyTensor 3 / ArviZ 1.x (``xarray.DataTree``).
"""

from __future__ import annotations

import arviz as az
import numpy as np
import pymc as pm
import pytensor
from pytensor.compile.mode import Mode, get_mode
from scipy.special import gammaln

PYMC_MAJOR = int(pm.__version__.split(".")[0])
PYTENSOR_MAJOR = int(pytensor.__version__.split(".")[0])
ARVIZ_MAJOR = int(az.__version__.split(".")[0])

BACKENDS = ("c", "numba")


def compile_mode(backend: str) -> Mode:
    """The PyTensor compilation mode for ``backend``.

    PyTensor 3 compiles with Numba by default, PyTensor 2 with C; we always ask explicitly.
    ``linker="c"`` fails on PyMC graphs (some Ops have no C code), so C means the ``cvm`` linker.
    """
    if backend == "c":
        return Mode(linker="cvm", optimizer="fast_run")
    if backend == "numba":
        return get_mode("NUMBA")
    raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


def model_types() -> tuple[type, ...]:
    """Classes a user may pass as a model (PyMC 6 adds ``FrozenModel``)."""
    frozen = getattr(pm.model, "FrozenModel", None)
    return (pm.Model,) if frozen is None else (pm.Model, frozen)


def arviz_from_groups(groups: dict):
    """Build the ArviZ object of the installed version from ``{group: xarray.Dataset}``.

    ArviZ 0.x returns ``InferenceData``, ArviZ 1.x an ``xarray.DataTree``.
    """
    if ARVIZ_MAJOR >= 1:
        import xarray as xr

        return xr.DataTree.from_dict(groups)
    return az.InferenceData(**groups)


def is_arviz_data(data) -> bool:
    """True for ArviZ's data object of either stack: ``InferenceData`` or ``xarray.DataTree``."""
    if _is_datatree(data):
        return True
    # ArviZ 1.x warns on any use of az.InferenceData, which it no longer has
    return ARVIZ_MAJOR < 1 and isinstance(data, az.InferenceData)


def _is_datatree(data) -> bool:
    return hasattr(data, "children") and hasattr(data, "to_dataset")


def arviz_groups(data) -> dict:
    """The inverse of :func:`arviz_from_groups`: ``{group: xarray.Dataset}`` of an
    ``InferenceData`` or a ``DataTree`` (whichever ArviZ produced it)."""
    if _is_datatree(data):
        return {name: node.to_dataset() for name, node in data.children.items()}
    return {name: data[name] for name in data.groups()}


def own_dataset(data):
    """The variables a ``DataTree`` node holds itself (e.g. ``idata.posterior`` under ArviZ
    1.x, which is a node, not a Dataset), or None for anything else or an empty node."""
    if _is_datatree(data) and data.data_vars:
        return data.to_dataset()
    return None


def ess(values, method: str = "bulk") -> float:
    """ArviZ's effective sample size of a (chain, draw) array; NaN where it is undefined
    (constant or too short arrays)."""
    try:
        return float(az.ess(np.asarray(values, dtype=float), method=method))
    except Exception:
        return np.nan


def rhat(values) -> float:
    """ArviZ's rank-normalised R-hat of a (chain, draw) array; NaN where it is undefined."""
    if np.shape(values)[0] < 2:
        return np.nan
    try:
        return float(az.rhat(np.asarray(values, dtype=float)))
    except Exception:
        return np.nan


def to_netcdf(data, path) -> None:
    if ARVIZ_MAJOR >= 1:
        data.to_netcdf(path, engine="h5netcdf")
    else:
        data.to_netcdf(str(path), engine="h5netcdf")


def from_netcdf(path):
    if ARVIZ_MAJOR >= 1:
        import xarray as xr

        return xr.open_datatree(path, engine="h5netcdf").load()
    return az.from_netcdf(str(path), engine="h5netcdf")


def lkj_log_normaliser(eta: float, n: int) -> float:
    """Log normalising constant of the LKJ(η) density over n×n correlation matrices
    (Lewandowski, Kurowicka & Joe 2009): log of 1 / ∫ det(C)^(η−1) dC."""
    k = np.arange(1, n)
    return float((n - 1) * gammaln(eta + 0.5 * (n - 1))
                 - np.sum(0.5 * k * np.log(np.pi) + gammaln(eta + 0.5 * (n - 1 - k))))


def lkj_normaliser_error(eta: float, n: int) -> float:
    """How far PyMC's LKJ log normalising constant (in ``LKJCholeskyCov`` and ``LKJCorr``)
    lies above the true one: PyMC 5 has its sign reversed, so those densities integrate to
    exp(−2 log c) (e.g. 0.58 nats too high for n = 2, η = 2); PyMC 6 is right (0)."""
    try:
        from pymc.distributions.multivariate import _lkj_normalizing_constant
    except ImportError:  # gone from a later PyMC: assume the constant is right there
        return 0.0
    pymc_value = float(pytensor.tensor.as_tensor_variable(_lkj_normalizing_constant(eta, n)).eval())
    return pymc_value - lkj_log_normaliser(eta, n)
