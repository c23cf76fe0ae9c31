"""The one result type every estimator returns, and its ArviZ/netCDF form."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import xarray as xr

from pymc_evidence import _compat

__all__ = ["EvidenceResult", "EvidenceWarning", "load_result"]


class EvidenceWarning(UserWarning):
    """A soft problem with an evidence estimate (low ESS, non-PD Hessian, disagreement...)."""


def warn(messages: list[str], text: str, stacklevel: int = 3) -> None:
    """Record ``text`` in a result's warning list and emit it as an :class:`EvidenceWarning`."""
    messages.append(text)
    warnings.warn(text, EvidenceWarning, stacklevel=stacklevel)


@dataclass
class EvidenceResult:
    """A log-evidence estimate with its standard error and diagnostics.

    Attributes
    ----------
    method : str
        Estimator name, e.g. ``"thermodynamic"``, ``"laplace"``, ``"bic"``.
    log_evidence : float
        Estimate of ``log p(D | M)`` in nats.
    se : float
        Its standard error (nats); 0 for deterministic approximations (Laplace, BIC), whose error
        is not a sampling error.
    model_name : str
    diagnostics : pandas.DataFrame
        One row per stage (thermodynamic), per mode (Laplace), ...; the index name is the
        dimension name used in :meth:`to_arviz`.
    posterior : dict of str to ndarray, optional
        Draws at λ = 1 in the constrained space, named like ``pm.sample`` output, each with
        leading dimensions ``(chain, draw)``.
    sample_stats : dict of str to ndarray, optional
        Per-draw statistics with leading dimensions ``(chain, draw)`` (e.g. ``log_likelihood``).
    estimates : dict of str to float
        Other estimates computed on the way (e.g. the thermodynamic-integration estimate and its
        SE beside the stepping-stone one).
    settings : dict
        The options the estimator ran with (JSON-serialisable).
    timing : dict
        Seconds spent per phase (e.g. ``compile``, ``sampling``, ``total``).
    warnings : list of str
        Every soft problem found; each was also emitted as an :class:`EvidenceWarning`.
    trace : pandas.DataFrame, optional
        Long-format per-transition records of a few tracked chains (columns ``stage``,
        ``lambda``, ``transition``, ``chain``, ``log_prior``, ``log_likelihood``), the data of
        Barber & Bishop's Fig. 1a (see :func:`~pymc_evidence.plot_trace_energy`).
    modes : dict of str to ndarray, optional
        The points found by an optimising estimator (Laplace), in the constrained space, named
        like ``posterior``, each with leading dimension ``mode`` in the order of
        ``diagnostics``' rows (e.g. for predictions at the MAP).
    """

    method: str
    log_evidence: float
    se: float
    model_name: str = ""
    diagnostics: pd.DataFrame = field(default_factory=pd.DataFrame)
    posterior: dict | None = None
    sample_stats: dict | None = None
    estimates: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    timing: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    trace: pd.DataFrame | None = None
    modes: dict | None = None

    @property
    def warning(self) -> bool:
        """True if any soft problem was found (the ``warning`` column of :func:`compare`)."""
        return bool(self.warnings)

    def summary(self) -> str:
        lines = [
            f"EvidenceResult({self.method}) for model {self.model_name or '(unnamed)'}",
            f"  log evidence = {self.log_evidence:.4f} ± {self.se:.4f} (SE)",
        ]
        for name, value in self.estimates.items():
            lines.append(f"  {name} = {value:.4f}")
        if "total" in self.timing:
            lines.append(f"  time: {self.timing['total']:.1f} s")
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()

    # ------------------------------------------------------------------ ArviZ
    def to_arviz(self):
        """The result as ``InferenceData`` (ArviZ 0.x) or ``xarray.DataTree`` (ArviZ 1.x).

        Groups: ``posterior`` and ``sample_stats`` (dims ``chain``, ``draw``) when draws exist,
        ``modes`` (dim ``mode``) when modes were found, and ``evidence``: the per-stage
        diagnostics along their own dimension, with the estimate, its SE, the method, settings
        and warnings as attributes.
        """
        groups = {}
        if self.posterior:
            groups["posterior"] = _draws_dataset(self.posterior)
        if self.sample_stats:
            groups["sample_stats"] = _draws_dataset(self.sample_stats)
        if self.modes:
            groups["modes"] = _draws_dataset(self.modes, leading=("mode",))
        groups["evidence"] = self._evidence_dataset()
        if self.trace is not None:
            groups["trace"] = xr.Dataset(
                {column: (("record",), self.trace[column].to_numpy()) for column in self.trace}
            )
        return _compat.arviz_from_groups(groups)

    def _evidence_dataset(self) -> xr.Dataset:
        dim = self.diagnostics.index.name or "stage"
        frame = self.diagnostics.reset_index(drop=True)
        data_vars = {
            column: ((dim,), _plain(frame[column].to_numpy())) for column in frame.columns
        }
        attrs = {
            "method": self.method,
            "log_evidence": float(self.log_evidence),
            "se": float(self.se),
            "model_name": self.model_name,
            "diagnostics_dim": dim,
            "estimates": json.dumps(self.estimates),
            "settings": json.dumps(self.settings, default=str),
            "timing": json.dumps(self.timing),
            "warnings": json.dumps(self.warnings),
        }
        return xr.Dataset(data_vars, coords={dim: np.arange(len(frame))}, attrs=attrs)

    def to_netcdf(self, path) -> None:
        """Write :meth:`to_arviz` to a netCDF file (read back with :func:`load_result`)."""
        _compat.to_netcdf(self.to_arviz(), path)

    @classmethod
    def from_arviz(cls, data) -> "EvidenceResult":
        """Rebuild a result from :meth:`to_arviz`'s output."""
        groups = _compat.arviz_groups(data)
        evidence = groups["evidence"]
        attrs = evidence.attrs
        dim = attrs["diagnostics_dim"]
        diagnostics = pd.DataFrame({name: evidence[name].values for name in evidence.data_vars})
        diagnostics.index.name = dim

        def draws(group):
            if group not in groups:
                return None
            return {name: groups[group][name].values for name in groups[group].data_vars}

        return cls(
            method=attrs["method"],
            log_evidence=float(attrs["log_evidence"]),
            se=float(attrs["se"]),
            model_name=attrs.get("model_name", ""),
            diagnostics=diagnostics,
            posterior=draws("posterior"),
            sample_stats=draws("sample_stats"),
            estimates=json.loads(attrs["estimates"]),
            settings=json.loads(attrs["settings"]),
            timing=json.loads(attrs["timing"]),
            warnings=json.loads(attrs["warnings"]),
            trace=groups["trace"].to_dataframe().reset_index(drop=True) if "trace" in groups else None,
            modes=draws("modes"),
        )


def load_result(path) -> EvidenceResult:
    """Read an :class:`EvidenceResult` written by :meth:`EvidenceResult.to_netcdf`."""
    return EvidenceResult.from_arviz(_compat.from_netcdf(path))


def _plain(values: np.ndarray) -> np.ndarray:
    """netCDF cannot store object columns: booleans as bool, anything else as str."""
    if values.dtype == object:
        return values.astype(str)
    return values


def _draws_dataset(draws: dict, leading=("chain", "draw")) -> xr.Dataset:
    """Draws with ``leading`` dims, (chain, draw) by default, with coordinates as ArviZ's plots
    expect."""
    data_vars, coords = {}, {}
    for name, values in draws.items():
        values = np.asarray(values)
        dims = [*leading] + [f"{name}_dim_{i}" for i in range(values.ndim - len(leading))]
        data_vars[name] = (dims, values)
        coords.update({dim: np.arange(size) for dim, size in zip(dims, values.shape)})
    return xr.Dataset(data_vars, coords=coords)
