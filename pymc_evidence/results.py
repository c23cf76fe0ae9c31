"""The result types the estimators return (one per method, on one frozen base), and their
ArviZ/netCDF form."""

from __future__ import annotations

import copy
import json
import warnings
from dataclasses import dataclass, field, fields, replace
from typing import ClassVar

import numpy as np
import pandas as pd
import xarray as xr

from pymc_evidence import _compat

__all__ = [
    "EvidenceResult", "ThermodynamicResult", "LaplaceResult", "BICResult", "BridgeResult",
    "CMCResult", "NestedResult", "EvidenceWarning", "load_result",
]


class EvidenceWarning(UserWarning):
    """A soft problem with an evidence estimate (low ESS, non-PD Hessian, disagreement...)."""


def warn(messages: list[str], text: str, stacklevel: int = 3) -> None:
    """Record ``text`` in a result's warning list and emit it as an :class:`EvidenceWarning`."""
    messages.append(text)
    warnings.warn(text, EvidenceWarning, stacklevel=stacklevel)


@dataclass(frozen=True)
class EvidenceResult:
    """A log-evidence estimate with its standard error and diagnostics: the fields every
    estimator fills. Each estimator returns its own subclass, whose extra fields name what it
    computed on the way (e.g. :attr:`ThermodynamicResult.ti_log_evidence`).

    Attributes
    ----------
    method : str
        Estimator name (a class attribute), e.g. ``"thermodynamic"``, ``"laplace"``, ``"bic"``.
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
    settings : dict
        The options the estimator ran with (JSON-serialisable); each result has its own copy.
    timing : dict
        Seconds spent per phase (e.g. ``compile``, ``sampling``, ``total``).
    warnings : tuple of str
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

    method: ClassVar[str] = "evidence"
    #: A deterministic approximation (se = 0): its error is not a sampling error.
    approximation: ClassVar[bool] = False

    log_evidence: float
    se: float
    model_name: str = ""
    diagnostics: pd.DataFrame = field(default_factory=pd.DataFrame)
    posterior: dict | None = None
    sample_stats: dict | None = None
    settings: dict = field(default_factory=dict)
    timing: dict = field(default_factory=dict)
    warnings: tuple = ()
    trace: pd.DataFrame | None = None
    modes: dict | None = None

    def __post_init__(self):
        # a result owns its settings and warnings: no list or dict shared with another result
        object.__setattr__(self, "warnings", tuple(self.warnings))
        object.__setattr__(self, "settings", copy.deepcopy(dict(self.settings)))
        object.__setattr__(self, "timing", dict(self.timing))

    @property
    def estimates(self) -> dict:
        """The method's own fields (those beyond :class:`EvidenceResult`'s), by name."""
        own = [f.name for f in fields(self) if f.name not in _BASE_FIELDS]
        return {name: getattr(self, name) for name in own}

    def renamed(self, model_name: str) -> "EvidenceResult":
        """The same result for a model called ``model_name``."""
        return replace(self, model_name=model_name)

    def difference_se(self, other: "EvidenceResult") -> float:
        """SE of ``self.log_evidence − other.log_evidence``: √(se² + se_other²), the two estimates
        being independent (a joint estimator's results override this)."""
        return float(np.hypot(self.se, other.se))

    @property
    def warning(self) -> bool:
        """True if any soft problem was found (the ``warning`` column of :func:`compare`)."""
        return bool(self.warnings)

    def summary(self) -> str:
        lines = [
            f"{type(self).__name__} for model {self.model_name or '(unnamed)'}",
            f"  log evidence = {self.log_evidence:.4f} "
            + ("(an approximation: its error is not a sampling error, and no SE is given)"
               if self.approximation else f"± {self.se:.4f} (SE)"),
        ]
        for name, value in self.estimates.items():
            lines.append(f"  {name} = {_shown(value)}")
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
            "warnings": json.dumps(list(self.warnings)),
        }
        return xr.Dataset(data_vars, coords={dim: np.arange(len(frame))}, attrs=attrs)

    def to_netcdf(self, path) -> None:
        """Write :meth:`to_arviz` to a netCDF file (read back with :func:`load_result`)."""
        _compat.to_netcdf(self.to_arviz(), path)

    @classmethod
    def from_arviz(cls, data) -> "EvidenceResult":
        """Rebuild a result, of the type its method returns, from :meth:`to_arviz`'s output
        (also from files written before results were typed)."""
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

        result_type = RESULT_TYPES.get(attrs["method"], EvidenceResult)
        return result_type(
            log_evidence=float(attrs["log_evidence"]),
            se=float(attrs["se"]),
            model_name=attrs.get("model_name", ""),
            diagnostics=diagnostics,
            posterior=draws("posterior"),
            sample_stats=draws("sample_stats"),
            settings=json.loads(attrs["settings"]),
            timing=json.loads(attrs["timing"]),
            warnings=json.loads(attrs["warnings"]),
            trace=groups["trace"].to_dataframe().reset_index(drop=True) if "trace" in groups else None,
            modes=draws("modes"),
            **result_type._own_fields(json.loads(attrs["estimates"])),
        )

    @classmethod
    def _own_fields(cls, estimates: dict) -> dict:
        """The stored estimates as this type's fields; files written before results were typed
        used the names of :data:`_RENAMED`."""
        types = {f.name: f.type for f in fields(cls) if f.name not in _BASE_FIELDS}
        renamed = {_RENAMED.get(k, k): v for k, v in estimates.items()}
        return {k: _as_type(types[k], v) for k, v in renamed.items() if k in types}


@dataclass(frozen=True, repr=False)  # keeps the summary as repr
class ThermodynamicResult(EvidenceResult):
    """:func:`~pymc_evidence.thermodynamic`'s result: stepping-stone in ``log_evidence``.

    Attributes
    ----------
    ti_log_evidence, ti_se : float
        The thermodynamic-integration estimate of the same quantity and its SE (a cross-check).
        NaN when the rungs do not resolve E_λ[log L] (e.g. a half-Cauchy scale prior makes
        E_0[log L] infinite) or every group's integral is non-finite.
    se_within, se_between : float
        The two parts of the SE: propagated from the stages' weights within groups, and from the
        spread between independent groups. ``se`` is the larger of ``se_within`` and
        ``se_between`` × t_{G−1}(0.975) / 1.96 for G = ``n_groups`` (1.62 at four groups: the
        spread of a few groups is itself uncertain), before what the effort check adds.
    group_log_sd : float
        Standard deviation of the groups' log evidences.
    n_stages, n_groups : int
        Rungs of the ladder after λ = 0; independent groups whose estimates are pooled.
    effort_particles, effort_transitions, effort_log_evidence, effort_se : tuple
        The effort check's levels (particles per group, HMC transitions per particle summed
        over the stages; each level's estimate and SE), the first being the groups the
        estimate started from; empty when the check did not run. On an MLP the transitions
        double from level to level, elsewhere the particles.
    best_log_joint_from_prior, best_log_joint_from_particles : float
        The mode search's highest log p(θ, D), optimised from prior draws and from the first
        round's particles; NaN when it did not run.
    log_evidence_from_prior, se_from_prior : float
        When the estimate comes from tempering that starts at a mode the search found: the
        first round's estimate and SE of the tempering from the prior, which it replaced (NaN
        otherwise).
    reference_sweeps, reference_log_evidence, reference_se : tuple
        The tempering from the mode's levels, whether or not it replaced the estimate: sweeps
        of HMC that relaxed the population at the mode before the reference was fitted to
        it, and each level's estimate and SE; empty when it did not run.
    """

    method: ClassVar[str] = "thermodynamic"

    ti_log_evidence: float = np.nan
    ti_se: float = np.nan
    se_within: float = np.nan
    se_between: float = np.nan
    group_log_sd: float = np.nan
    n_stages: int = 0
    n_groups: int = 0
    effort_particles: tuple = ()
    effort_transitions: tuple = ()
    effort_log_evidence: tuple = ()
    effort_se: tuple = ()
    best_log_joint_from_prior: float = np.nan
    best_log_joint_from_particles: float = np.nan
    log_evidence_from_prior: float = np.nan
    se_from_prior: float = np.nan
    reference_sweeps: tuple = ()
    reference_log_evidence: tuple = ()
    reference_se: tuple = ()


@dataclass(frozen=True, repr=False)  # keeps the summary as repr
class LaplaceResult(EvidenceResult):
    """:func:`~pymc_evidence.laplace`'s result.

    Attributes
    ----------
    log_evidence_top_mode : float
        The best mode's contribution alone.
    log_symmetry : float
        Log of the number of symmetry-equivalent modes added (``log(2^h h!)`` per MLP layer).
    importance_log_evidence, importance_ess : float
        The check of the approximation (``check_draws``): the evidence by importance sampling
        from the Laplace mixture, and the effective sample size of its weights. NaN when not
        computed.
    n_modes, n_optimisations : int
        Distinct modes found; optimisations run.
    hyperparameters : dict
        MacKay's framework: ``alpha_<group>``, ``gamma_<group>`` and ``beta`` at the best mode.
    """

    method: ClassVar[str] = "laplace"
    approximation: ClassVar[bool] = True

    log_evidence_top_mode: float = np.nan
    log_symmetry: float = 0.0
    importance_log_evidence: float = np.nan
    importance_ess: float = np.nan
    n_modes: int = 0
    n_optimisations: int = 0
    hyperparameters: dict = field(default_factory=dict)

    @classmethod
    def _own_fields(cls, estimates: dict) -> dict:
        hyper = {k: v for k, v in estimates.items() if k.startswith(("alpha_", "beta", "gamma_"))}
        own = super()._own_fields({k: v for k, v in estimates.items() if k not in hyper})
        return {"hyperparameters": hyper, **own}


@dataclass(frozen=True, repr=False)  # keeps the summary as repr
class BICResult(EvidenceResult):
    """:func:`~pymc_evidence.bic`'s result: ``log_evidence`` = −BIC / 2.

    Attributes
    ----------
    log_likelihood : float
        log p(D | θ̂).
    bic : float
        k log n − 2 log p(D | θ̂).
    k, n : int
        Parameters and i.i.d. cases.
    """

    method: ClassVar[str] = "bic"
    approximation: ClassVar[bool] = True

    log_likelihood: float = np.nan
    bic: float = np.nan
    k: int = 0
    n: int = 0


@dataclass(frozen=True, repr=False)  # keeps the summary as repr
class BridgeResult(EvidenceResult):
    """:func:`~pymc_evidence.bridge`'s result.

    Attributes
    ----------
    re2 : float
        Relative mean-squared error of the evidence estimate (Frühwirth-Schnatter 2004).
    cv : float
        Its square root, the coefficient of variation (≈ ``se``).
    log_evidence_first_iteration : float
        The bridge estimate after one iteration.
    """

    method: ClassVar[str] = "bridge"

    re2: float = np.nan
    cv: float = np.nan
    log_evidence_first_iteration: float = np.nan


@dataclass(frozen=True, repr=False)  # keeps the summary as repr
class CMCResult(EvidenceResult):
    """One model's result of :func:`~pymc_evidence.cmc` (a joint run over a list of models).

    Attributes
    ----------
    probability, probability_se : float
        The model's posterior probability under a uniform model prior, and its SE.
    log_g : float
        The learnt log weight ĝ of the model's region.
    frequency : float
        Share of the joint run's iterations spent in this model.
    between_acceptance, within_acceptance : float
        Acceptance of the moves into other models, and of the HMC moves within this one.
    anchor, anchor_se : float
        The offset that lifts log p̂_i to log evidences (the inverse-variance weighted mean over
        models of importance-sampling log Ẑ_i − log p̂_i; 0 without anchor draws), and its SE.
        ``se`` is the SE of log p̂_i + anchor, whose errors are correlated (the anchor holds
        log p̂_j of the models that fix it); differences between the models of one run
        (:meth:`difference_se`) carry neither the anchor nor its error.
    anchor_weight : float
        This model's weight in the anchor (0 without anchor draws).
    replica_probability : tuple of float
        The model's probability ĝ_i / Σ_j ĝ_j in each replica of the run.
    importance_log_evidence, importance_se : float
        This model's own importance-sampling evidence from its pilot, and its SE.
    n_iterations : int
        Iterations of the joint run.
    hidden_units : int, optional
        With birth/death moves: the model's hidden units; ``birth_acceptance`` and
        ``death_acceptance`` the acceptance of the moves to one more and one fewer.
    """

    method: ClassVar[str] = "cmc"

    probability: float = np.nan
    probability_se: float = np.nan
    log_g: float = np.nan
    frequency: float = np.nan
    between_acceptance: float = np.nan
    within_acceptance: float = np.nan
    anchor: float = 0.0
    anchor_se: float = np.nan
    anchor_weight: float = 0.0
    importance_log_evidence: float = np.nan
    importance_se: float = np.nan
    n_iterations: int = 0
    hidden_units: int | None = None
    birth_acceptance: float = np.nan
    death_acceptance: float = np.nan
    replica_probability: tuple = ()

    def difference_se(self, other: EvidenceResult) -> float:
        """SE of the log evidence ratio to another model of the same run, from the replicas
        (delta method): the models' estimates share the anchor and Σ_i p̂_i = 1, so they are
        not independent. For a result of another run, √(se² + se_other²)."""
        same_run = (isinstance(other, CMCResult) and self.settings == other.settings
                    and self.timing == other.timing
                    and len(self.replica_probability) == len(other.replica_probability) > 1)
        if not same_run:
            return super().difference_se(other)
        p, q = np.asarray(self.replica_probability), np.asarray(other.replica_probability)
        spread = p / p.mean() - q / q.mean()
        return float(spread.std(ddof=1) / np.sqrt(spread.size))


@dataclass(frozen=True, repr=False)  # keeps the summary as repr
class NestedResult(EvidenceResult):
    """:func:`~pymc_evidence.nested`'s result: independent runs' evidences, averaged.

    Attributes
    ----------
    se_within, se_between : float
        The two parts of the SE: the runs' own nested-sampling errors (simulated log-volume
        sequences), combined, and the spread between the runs (``se`` is the larger).
    run_log_evidence, run_se : tuple of float
        Each run's log evidence and its nested-sampling error.
    information : float
        H = KL(posterior ‖ prior) in nats, the mean over runs: NS needs about n_live·H
        replacements.
    n_runs, n_live : int
        Independent runs, and live points per run.
    n_evaluations : int
        Density evaluations over all runs.
    ess : float
        Kish's effective sample size of the pooled posterior weights.
    insertion_z : float
        Insertion-rank test over all runs (Fowlie, Handley and Su 2020): the new points' log L
        ranks among the survivors', N(0, 1) when the slice moves draw from the constrained
        prior; large positive values mean replacements stay above where they belong.
    run_inner_steps : tuple of int
        Each run's slice moves per replacement (runs of the moves check have more).
    moves_levels, moves_log_evidence, moves_se : tuple
        The moves check's levels (slice moves per replacement; each level's estimate and SE),
        empty when it did not run.
    """

    method: ClassVar[str] = "nested"

    se_within: float = np.nan
    se_between: float = np.nan
    run_log_evidence: tuple = ()
    run_se: tuple = ()
    information: float = np.nan
    n_runs: int = 0
    n_live: int = 0
    n_evaluations: int = 0
    ess: float = np.nan
    insertion_z: float = np.nan
    run_inner_steps: tuple = ()
    moves_levels: tuple = ()
    moves_log_evidence: tuple = ()
    moves_se: tuple = ()


#: The result type of each method, for reading files back.
RESULT_TYPES = {cls.method: cls for cls in (
    ThermodynamicResult, LaplaceResult, BICResult, BridgeResult, CMCResult, NestedResult)}

_BASE_FIELDS = {f.name for f in fields(EvidenceResult)}

#: Estimate names of files written before results were typed -> field names.
_RENAMED = {"ti": "ti_log_evidence", "is_log_evidence": "importance_log_evidence",
            "is_se": "importance_se"}


def _shown(value) -> str:
    """A field's value in a summary: floats to 4 decimals, long tuples cut after four."""
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, tuple) and value and all(isinstance(v, float) for v in value):
        head = ", ".join(f"{v:.4f}" for v in value[:4])
        return f"({head}, … {len(value)} values)" if len(value) > 4 else f"({head})"
    return f"{value}"


def _as_type(annotation: str, value):
    """A value read from JSON in the type of its field (JSON has no int/float or tuple)."""
    if value is None:
        return None
    if annotation in ("int", "int | None"):
        return int(value)
    if annotation == "tuple":
        return tuple(value)
    return value


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
