"""Bridge sampling from posterior draws (Meng & Wong 1996; Gronau et al. 2017), as in R's
``bridgesampling``: the estimator Bayesian statisticians using Stan or R compare against."""

from __future__ import annotations

import contextlib
import logging
import numbers
import time
import weakref
from typing import NamedTuple

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from pymc.pytensorf import compile as compile_pymc
from pytensor.graph.replace import clone_replace, vectorize_graph
from scipy.special import logsumexp

from pymc_evidence._constants import LOG_2PI
from pymc_evidence._random import as_generator
from pymc_evidence._validation import choice, integer, number, resolve_model
from pymc_evidence.density import get_density
from pymc_evidence.results import EvidenceResult, warn

__all__ = ["bridge"]

BRIDGE_METHODS = ("normal", "warp3")
#: A relative error of the evidence (coefficient of variation, √RE²) above this is flagged.
MAX_CV = 0.2
#: Fewer effective posterior draws (iteration half) than this are flagged.
MIN_ESS = 100
#: R-hat of the log posterior density across chains above this is flagged.
MAX_RHAT = 1.05
#: Points per call when evaluating the compiled density.
CHUNK = 4096
#: Tags the proposal's random stream when ``random_seed`` is an int (see ``_seeds``): an int
#: seed also goes to ``pm.sample``, whose streams use spawn keys (), (0,), (1,), ...
_PROPOSAL_SPAWN_KEY = (0x62726964,)  # "brid"


class _Proposal(NamedTuple):
    """Multivariate normal N(mean, cov) fitted to the first half of the draws."""

    mean: np.ndarray  # (d,)
    chol: np.ndarray  # (d, d) lower Cholesky factor L of cov
    log_det_chol: float  # log |L| = ½ log det cov
    condition_number: float  # of cov
    jitter: float  # added to cov's diagonal to make it positive definite (0 if none)

    def standardise(self, X: np.ndarray) -> np.ndarray:
        """ψ = L⁻¹(θ − μ) for the rows of X."""
        from scipy.linalg import solve_triangular

        return solve_triangular(self.chol, (X - self.mean).T, lower=True).T

    def log_density(self, X: np.ndarray) -> np.ndarray:
        """log N(θ | μ, LLᵀ) at the rows of X."""
        return _log_std_normal(self.standardise(X)) - self.log_det_chol


class _Iteration(NamedTuple):
    log_evidence: float
    iterations: int
    converged: bool
    final_change: float  # |r_t − r_{t−1}| / r_t at the last iteration
    path: np.ndarray  # log r after each iteration


def _log_std_normal(Z: np.ndarray) -> np.ndarray:
    return -0.5 * (np.sum(Z * Z, axis=1) + Z.shape[1] * LOG_2PI)


def _posterior_dataset(idata) -> xr.Dataset:
    """The posterior group of ``idata`` (InferenceData, DataTree, or a posterior Dataset)."""
    if isinstance(idata, xr.Dataset):
        posterior = idata
    elif hasattr(idata, "children") and hasattr(idata, "to_dataset"):  # xarray.DataTree
        if "posterior" in idata.children:
            posterior = idata["posterior"].to_dataset()
        elif idata.data_vars and {"chain", "draw"} <= set(idata.dims):
            posterior = idata.to_dataset()  # the posterior node itself, e.g. idata.posterior
        else:
            raise ValueError(
                "idata has no 'posterior' group (its groups: "
                f"{sorted(idata.children) or 'none'}); pass the output of pm.sample"
            )
    elif hasattr(idata, "groups"):  # arviz.InferenceData
        if "posterior" not in idata.groups():
            raise ValueError(
                f"idata has no 'posterior' group (its groups: {idata.groups() or 'none'}); "
                "pass the output of pm.sample"
            )
        posterior = idata["posterior"]
    else:
        raise TypeError(
            "idata must be an arviz.InferenceData, an xarray.DataTree or an xarray.Dataset of "
            f"posterior draws, got {type(idata).__name__}"
        )
    missing = {"chain", "draw"} - set(posterior.dims)
    if missing:
        raise ValueError(
            f"the posterior must have dimensions 'chain' and 'draw'; missing {sorted(missing)}"
        )
    return posterior


# --------------------------------------------------------------------------- posterior draws
def _seeds(random_seed):
    """``(seed for pm.sample, Generator for the proposal draws)`` from ``random_seed``.

    An int (or None) goes to ``pm.sample`` unchanged, so that ``bridge(model, random_seed=s)``
    uses exactly the draws of ``pm.sample(..., random_seed=s)``; the proposal's stream is then
    spawned from the same seed under a key of its own. A Generator, SeedSequence or sequence
    is turned into one Generator, which draws the seed for ``pm.sample`` and then the proposal.
    """
    if random_seed is None or (
        isinstance(random_seed, numbers.Integral) and not isinstance(random_seed, bool)
    ):
        seed_seq = np.random.SeedSequence(random_seed, spawn_key=_PROPOSAL_SPAWN_KEY)
        sample_seed = random_seed if random_seed is None else int(random_seed)
        return sample_seed, np.random.default_rng(seed_seq)
    rng = as_generator(random_seed)
    return int(rng.integers(2**30)), rng


@contextlib.contextmanager
def _quiet_pymc(enabled: bool):
    """Silence PyMC's sampling log messages (NUTS assignment, timings) when ``enabled``."""
    if not enabled:
        yield
        return
    logger = logging.getLogger("pymc")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


#: ``pm.sample`` arguments that ``bridge`` sets from its own parameters.
_OWN_SAMPLE_ARGS = ("draws", "tune", "chains", "random_seed", "progressbar", "model",
                    "return_inferencedata")


def _sample_posterior(model, density, draws, tune, chains, seed, progressbar, sample_kwargs):
    """NUTS draws: ``pm.sample`` on one core with the density's compile mode."""
    options = dict(
        cores=1,
        nuts_sampler="pymc",
        compute_convergence_checks=False,
        compile_kwargs={"mode": density.mode},
    )
    options.update(sample_kwargs)
    with _quiet_pymc(not progressbar):
        return pm.sample(
            draws=draws,
            tune=tune,
            chains=chains,
            random_seed=seed,
            progressbar=progressbar,
            model=model,
            **options,
        )


_forward_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _forward_fn(density):
    """Compiled map from constrained draws (one array per free variable, leading axis N) to the
    unconstrained value variables, ``transform.forward(value, *rv.owner.inputs)`` vectorised
    over N. Parents in the inputs (e.g. bounds that depend on other variables) are the draws'
    own values, so parent-dependent transforms are exact."""
    if density in _forward_cache:
        return _forward_cache[density]
    model = density.model
    rvs = list(model.free_RVs)
    holders = [rv.type() for rv in rvs]
    outputs = []
    for rv in rvs:
        transform = model.rvs_to_transforms.get(rv)
        outputs.append(transform.forward(rv, *rv.owner.inputs) if transform else rv)
    outputs = clone_replace(outputs, replace=dict(zip(rvs, holders)))
    batched = [pt.tensor(dtype=h.type.dtype, shape=(None, *h.type.shape)) for h in holders]
    outputs = vectorize_graph(outputs, replace=dict(zip(holders, batched)))
    fn = compile_pymc(batched, outputs, mode=density.mode)
    _forward_cache[density] = (fn, [rv.name for rv in rvs], [h.type.dtype for h in holders])
    return _forward_cache[density]


def _unconstrained_draws(density, posterior: xr.Dataset) -> np.ndarray:
    """The posterior's draws in the flat unconstrained space, shape (chain, draw, d)."""
    fn, names, dtypes = _forward_fn(density)
    missing = [name for name in names if name not in posterior.data_vars]
    if missing:
        raise ValueError(
            f"the posterior has no draws of free variable(s) {missing} of model "
            f"{density.model.name or '(unnamed)'!r} (it has {sorted(posterior.data_vars)}); "
            "pass draws of every free variable, e.g. pm.sample without var_names"
        )
    n_chain, n_draw = posterior.sizes["chain"], posterior.sizes["draw"]
    arrays = []
    for name, dtype in zip(names, dtypes):
        values = np.asarray(posterior[name].transpose("chain", "draw", ...).values, dtype=dtype)
        arrays.append(values.reshape((n_chain * n_draw, *values.shape[2:])))
    try:
        outputs = fn(*arrays)
    except Exception as err:  # shapes that do not match the model
        found = {name: a.shape[1:] for name, a in zip(names, arrays)}
        raise ValueError(
            "the posterior draws do not fit the model's free variables (shapes per draw: "
            f"{found}): {str(err).strip().splitlines()[0]}"
        ) from err
    flat = np.concatenate(
        [np.asarray(o, dtype=float).reshape(n_chain * n_draw, -1) for o in outputs], axis=1
    )
    if flat.shape[1] != density.dim:
        raise ValueError(
            f"the posterior draws map to {flat.shape[1]} unconstrained values per draw, the "
            f"model has {density.dim}: check the draws' shapes"
        )
    return flat.reshape(n_chain, n_draw, density.dim)


def _log_joint(density, X: np.ndarray):
    """Log prior and log likelihood at the rows of X, in chunks; NaN is mapped to −inf."""
    prior, lik = [], []
    for start in range(0, X.shape[0], CHUNK):
        values = density(X[start : start + CHUNK])
        prior.append(values.log_prior)
        lik.append(values.log_likelihood)
    prior, lik = np.concatenate(prior), np.concatenate(lik)
    log_joint = prior + lik
    return np.where(np.isnan(log_joint), -np.inf, log_joint), prior, lik


# --------------------------------------------------------------------------- the bridge
def _fit_proposal(X: np.ndarray) -> _Proposal:
    """Mean and covariance of the rows of X; the covariance is made positive definite by
    adding the smallest sufficient jitter (as R's ``nearPD`` step in ``bridgesampling``)."""
    mean = X.mean(axis=0)
    cov = np.atleast_2d(np.cov(X, rowvar=False))
    scale = float(np.max(np.diag(cov))) if cov.size else 1.0
    jitter = 0.0
    for _ in range(12):
        try:
            chol = np.linalg.cholesky(cov + jitter * np.eye(len(mean)))
            break
        except np.linalg.LinAlgError:
            jitter = max(10 * jitter, 1e-10 * max(scale, np.finfo(float).tiny))
    else:
        raise ValueError(
            "the posterior draws' covariance is not positive definite even with jitter: the "
            "draws may be stuck (no movement in some direction); check the sampler"
        )
    eig = np.linalg.eigvalsh(chol @ chol.T)
    return _Proposal(
        mean=mean,
        chol=chol,
        log_det_chol=float(np.sum(np.log(np.diag(chol)))),
        condition_number=float(eig[-1] / eig[0]) if eig[0] > 0 else np.inf,
        jitter=float(jitter),
    )


def _iterate(l1, l2, log_s1, log_s2, max_iter, tol) -> _Iteration:
    r"""Meng & Wong's fixed point for the optimal bridge, in log space.

    .. math::
        \hat r^{(t+1)} = \frac{\frac{1}{N_2}\sum_j \frac{l_{2,j}}{s_1 l_{2,j} + s_2 \hat r^{(t)}}}
                              {\frac{1}{N_1}\sum_i \frac{1}{s_1 l_{1,i} + s_2 \hat r^{(t)}}}
    """
    log_n1, log_n2 = np.log(l1.size), np.log(l2.size)
    log_r = float(np.median(l1[np.isfinite(l1)])) if np.isfinite(l1).any() else 0.0
    path, change = [], np.inf
    for t in range(1, max_iter + 1):
        numerator = logsumexp(l2 - np.logaddexp(log_s1 + l2, log_s2 + log_r)) - log_n2
        denominator = logsumexp(-np.logaddexp(log_s1 + l1, log_s2 + log_r)) - log_n1
        new = float(numerator - denominator)
        change = abs(float(np.expm1(log_r - new)))  # |r_t − r_{t−1}| / r_t
        log_r = new
        path.append(log_r)
        if not np.isfinite(log_r) or change < tol:
            break
    return _Iteration(log_r, t, bool(change < tol), change, np.asarray(path))


def _ess(values: np.ndarray, method: str = "bulk") -> float:
    """ArviZ's effective sample size of a (chain, draw) array; NaN if undefined."""
    try:
        return float(az.ess(np.asarray(values, dtype=float), method=method))
    except Exception:  # constant or too short arrays
        return np.nan


def _relative_error(log_z, t1, g1, t2, g2, log_s1, log_s2, shape):
    """Frühwirth-Schnatter's (2004) approximate relative mean-squared error of Ẑ.

    RE² = Var_g(f1)/(N2 E_g[f1]²) + Var_p(f2)/(ESS(f2) E_p[f2]²), with p the normalised target
    (posterior, or its warp-III version), g the proposal, f1 = p/(s1 p + s2 g) at the proposal
    draws (independent) and f2 = g/(s1 p + s2 g) at the posterior draws, whose autocorrelation
    enters through ArviZ's ESS of f2 for a mean (``method="mean"``; N1/ESS is the normalised
    spectral density at zero that Frühwirth-Schnatter and ``bridgesampling::error_measures``
    use).
    """
    log_p2 = t2 - log_z
    f1 = np.exp(log_p2 - np.logaddexp(log_s1 + log_p2, log_s2 + g2))
    log_p1 = t1 - log_z
    f2 = np.exp(g1 - np.logaddexp(log_s1 + log_p1, log_s2 + g1))
    term1 = float(np.var(f1, ddof=1) / (f1.size * np.mean(f1) ** 2))
    ess_f2 = _ess(f2.reshape(shape), method="mean")  # the ESS of a mean, not rank-based
    var_f2 = float(np.var(f2, ddof=1))
    if var_f2 == 0.0:
        term2 = 0.0
    else:
        n_eff = ess_f2 if np.isfinite(ess_f2) and ess_f2 > 0 else f2.size
        term2 = var_f2 / (n_eff * np.mean(f2) ** 2)
    return term1, term2, ess_f2


def _rhat(values: np.ndarray) -> float:
    if values.shape[0] < 2:
        return np.nan
    try:
        return float(az.rhat(np.asarray(values, dtype=float)))
    except Exception:
        return np.nan


def bridge(
    model=None,
    *,
    idata=None,
    draws: int = 2000,
    tune: int = 1000,
    chains: int = 4,
    sample_kwargs: dict | None = None,
    method: str = "normal",
    proposal_draws: int | None = None,
    max_iter: int = 1000,
    tol: float = 1e-10,
    random_seed=None,
    progressbar: bool = True,
    backend: str = "c",
) -> EvidenceResult:
    r"""Bridge-sampling estimate of the log evidence from posterior draws.

    With :math:`q(\theta) = p(D \mid \theta)\,p(\theta)` the unnormalised posterior in the
    model's unconstrained space (prior with the transforms' log-Jacobians) and :math:`g` a
    normalised proposal density, the bridge identity (Meng & Wong 1996) is

    .. math::

        Z = \frac{\mathbb{E}_{g}\left[q(\theta)\, h(\theta)\right]}
                 {\mathbb{E}_{p(\theta \mid D)}\left[g(\theta)\, h(\theta)\right]}

    for any bridge function :math:`h`. The optimal bridge
    :math:`h \propto 1 / (s_1 q(\theta) + s_2 Z g(\theta))` depends on :math:`Z` itself, so
    :math:`Z` is the fixed point of the iterative scheme (Meng & Wong 1996; Gronau et al. 2017,
    section "Bridge sampling", the optimal bridge function and its iterative scheme)

    .. math::

        \hat Z^{(t+1)} = \frac{\frac{1}{N_2} \sum_{j=1}^{N_2}
                \frac{l_{2,j}}{s_1 l_{2,j} + s_2 \hat Z^{(t)}}}
              {\frac{1}{N_1} \sum_{i=1}^{N_1} \frac{1}{s_1 l_{1,i} + s_2 \hat Z^{(t)}}},
        \qquad l_{1,i} = \frac{q(\theta^*_i)}{g(\theta^*_i)}, \quad
               l_{2,j} = \frac{q(\tilde\theta_j)}{g(\tilde\theta_j)},

    with :math:`\theta^*_i` the :math:`N_1` posterior draws of the iteration half,
    :math:`\tilde\theta_j` the :math:`N_2` proposal draws,
    :math:`s_1 = N_{\text{eff}} / (N_{\text{eff}} + N_2)`,
    :math:`s_2 = N_2 / (N_{\text{eff}} + N_2)` and :math:`N_{\text{eff}}` the effective sample
    size of the posterior draws (as R's ``bridgesampling`` does). All sums are computed on the
    log scale with ``logsumexp``.

    The error is Frühwirth-Schnatter's (2004) approximate relative mean-squared error,

    .. math::

        \mathrm{RE}^2 = \frac{1}{N_2}\frac{\mathbb{V}_g[f_1]}{\mathbb{E}_g[f_1]^2}
            + \frac{\rho_{f_2}(0)}{N_1}\frac{\mathbb{V}_p[f_2]}{\mathbb{E}_p[f_2]^2},
        \quad f_1 = \frac{p}{s_1 p + s_2 g}, \quad f_2 = \frac{g}{s_1 p + s_2 g},

    with :math:`p = q/\hat Z` and :math:`\rho_{f_2}(0) = N_1 / \mathrm{ESS}(f_2)` the
    autocorrelation of the posterior-draw terms (ArviZ's ESS for a mean); since
    :math:`\mathbb{V}[\log\hat Z] \approx \mathrm{RE}^2`, ``se`` is :math:`\sqrt{\mathrm{RE}^2}`.

    Parameters
    ----------
    model : pymc.Model, optional
        The model; taken from the ``with`` context when omitted. Continuous free variables
        only, proper priors.
    idata : arviz.InferenceData, xarray.DataTree or xarray.Dataset, optional
        Existing posterior draws of ``model`` (e.g. the output of ``pm.sample``; a Dataset is
        taken as the posterior group). Its constrained draws of every free variable are mapped
        through the model's transforms to the unconstrained space. Without it, draws come from
        PyMC's NUTS: ``pm.sample(draws, tune=tune, chains=chains, cores=1,
        random_seed=random_seed)`` compiled with ``backend``, so that
        ``bridge(model, random_seed=s)`` equals ``bridge(model, idata=pm.sample(..., cores=1,
        random_seed=s, compile_kwargs={"mode": "CVM"}), random_seed=s)`` for an int ``s``.
    draws, tune, chains : int, default 2000, 1000, 4
        NUTS settings when sampling (ignored with ``idata``). Bridge sampling needs more draws
        than estimation usually does (Gronau, Singmann & Wagenmakers 2020).
    sample_kwargs : dict, optional
        More keyword arguments for ``pm.sample`` when sampling, e.g. ``{"target_accept": 0.95}``;
        they override the defaults ``cores=1``, ``nuts_sampler="pymc"``,
        ``compute_convergence_checks=False`` and ``compile_kwargs={"mode": <backend's mode>}``.
    method : {"normal", "warp3"}, default "normal"
        ``"normal"``: the proposal is :math:`N(\hat\mu, \hat\Sigma)` fitted to the first half of
        every chain. ``"warp3"``: Warp-III (Meng & Schilling 2002; Gronau et al. 2017): the
        posterior is standardised with the same :math:`\hat\mu,\ L = \operatorname{chol}
        \hat\Sigma` and symmetrised, :math:`\tilde q(\psi) = \tfrac{|L|}{2}[q(\hat\mu - L\psi) +
        q(\hat\mu + L\psi)]` (same normalising constant), and bridged to :math:`N(0, I)`; this
        matches mean, covariance and skewness and is usually more accurate, at twice the density
        evaluations.
    proposal_draws : int, optional
        :math:`N_2`; default :math:`N_1`, the number of posterior draws in the iteration half.
    max_iter : int, default 1000
        Maximum number of fixed-point iterations.
    tol : float, default 1e-10
        Stop when the relative change :math:`|\hat Z^{(t+1)} - \hat Z^{(t)}| / \hat Z^{(t+1)}`
        is below ``tol``.
    random_seed : int, Generator, SeedSequence or None
        Seeds NUTS (an int goes to ``pm.sample`` unchanged) and the proposal draws.
    progressbar : bool, default True
        Show ``pm.sample``'s progress bar and messages.
    backend : {"c", "numba"}, default "c"
        PyTensor backend for the compiled density (and for NUTS when sampling).

    Returns
    -------
    EvidenceResult
        ``method="bridge"``, ``se`` = :math:`\sqrt{\mathrm{RE}^2}`. ``diagnostics`` has one row
        (index ``"bridge"``): ``method``, ``iterations``, ``converged``, ``final_change``,
        ``n_chains``, ``n_fit`` (draws fitting the proposal), ``n_iter`` (:math:`N_1`),
        ``n_proposal`` (:math:`N_2`), ``ess`` (:math:`N_{\text{eff}}`: ArviZ ESS of the log
        posterior density over the iteration half), ``ess_f2``, ``s1``, ``s2``,
        ``rhat_log_posterior``, ``proposal_log_det`` (:math:`\log\det\hat\Sigma`),
        ``proposal_condition_number``, ``proposal_jitter``, ``re2_proposal`` and
        ``re2_posterior`` (the two terms of RE²), ``re2``, ``cv`` (:math:`\sqrt{\mathrm{RE}^2}`),
        ``nonfinite_posterior``, ``nonfinite_proposal`` (draws with a non-finite log density),
        ``divergences``. ``estimates`` holds ``re2``, ``cv`` and ``log_evidence_first_iteration``;
        ``posterior`` the constrained draws and ``sample_stats`` their ``log_prior`` and
        ``log_likelihood``.

    Warns
    -----
    EvidenceWarning
        When the iteration did not converge within ``max_iter``, when the relative error
        :math:`\sqrt{\mathrm{RE}^2}` exceeds 0.2, when posterior draws have a non-finite log
        density, when NUTS diverged, when the chains disagree (R-hat of the log posterior
        density above 1.05) or when fewer than 100 effective draws enter the iteration.

    Notes
    -----
    1. Posterior draws: run NUTS, or take ``idata``'s draws and map them to the unconstrained
       space with ``transform.forward(value, *rv.owner.inputs)`` (one compiled, vectorised call).
    2. Split every chain in two: the first halves fit the proposal's mean and covariance; the
       second halves (:math:`N_1` draws) enter the iteration.
    3. Draw :math:`N_2` proposal points; evaluate :math:`\log q` (one batched call of the
       compiled density) and :math:`\log g` at both sets.
    4. :math:`N_{\text{eff}}` = ArviZ ESS of :math:`\log q` over the iteration half (capped at
       :math:`N_1`); iterate the fixed point from :math:`\log \hat Z^{(0)} =
       \operatorname{median}(\log l_{1,i})` until the relative change is below ``tol``.
    5. RE² as above; ``se`` = √RE².

    The proposal is fitted to draws other than those in the iteration, as Overstall & Forster
    (2010) recommend; fitting and iterating on the same draws biases the estimate.

    Examples
    --------
    >>> import pymc as pm
    >>> import pymc_evidence as pm_evidence
    >>> with pm.Model() as model:
    ...     mu = pm.Normal("mu", 0, 1)
    ...     y = pm.Normal("y", mu, 1, observed=[0.3, -0.1, 0.5])
    >>> res = pm_evidence.bridge(model, draws=500, tune=500, chains=2, random_seed=1,
    ...                          progressbar=False)
    >>> abs(res.log_evidence - (-3.5637)) < 0.02   # exact: -3.5637...
    True

    See Also
    --------
    pymc_evidence.thermodynamic, pymc_evidence.laplace, pymc_evidence.compare

    References
    ----------
    Meng, X.-L. and Wong, W. H. (1996). Simulating ratios of normalizing constants via a
    simple identity: a theoretical exploration. Statistica Sinica 6, 831–860.
    Meng, X.-L. and Schilling, S. (2002). Warp bridge sampling. Journal of Computational and
    Graphical Statistics 11(3), 552–586.
    Frühwirth-Schnatter, S. (2004). Estimating marginal likelihoods for mixture and Markov
    switching models using bridge sampling techniques. The Econometrics Journal 7, 143–167.
    Overstall, A. M. and Forster, J. J. (2010). Default Bayesian model determination methods
    for generalised linear mixed models. Computational Statistics & Data Analysis 54,
    3269–3288.
    Gronau, Q. F., Sarafoglou, A., Matzke, D., Ly, A., Boehm, U., Marsman, M., Leslie, D. S.,
    Forster, J. J., Wagenmakers, E.-J. and Steingroever, H. (2017). A tutorial on bridge
    sampling. Journal of Mathematical Psychology 81, 80–97.
    Gronau, Q. F., Singmann, H. and Wagenmakers, E.-J. (2020). bridgesampling: an R package
    for estimating normalizing constants. Journal of Statistical Software 92(10), 1–29.
    """
    t_start = time.perf_counter()
    choice("method", method, BRIDGE_METHODS)
    draws = integer("draws", draws, 4)
    tune = integer("tune", tune, 0)
    chains = integer("chains", chains, 1)
    max_iter = integer("max_iter", max_iter, 1)
    proposal_draws = integer("proposal_draws", proposal_draws, 2, optional=True)
    number("tol", tol, low=0, low_open=True)
    sample_kwargs = {} if sample_kwargs is None else dict(sample_kwargs)
    clash = sorted(set(sample_kwargs) & set(_OWN_SAMPLE_ARGS))
    if clash:
        raise TypeError(
            f"sample_kwargs may not set {clash}: pass them to bridge itself "
            "(draws, tune, chains, random_seed, progressbar, model)"
        )
    posterior = None if idata is None else _posterior_dataset(idata)

    model = resolve_model(model)
    density = get_density(model, backend=backend)
    sample_seed, rng = _seeds(random_seed)
    t_density = time.perf_counter()

    messages: list[str] = []
    sampled = posterior is None
    if sampled:
        idata = _sample_posterior(
            model, density, draws, tune, chains, sample_seed, progressbar, sample_kwargs
        )
        posterior = _posterior_dataset(idata)
    t_sampling = time.perf_counter()

    X = _unconstrained_draws(density, posterior)  # (chain, draw, d)
    n_chain, n_draw, d = X.shape
    if n_draw < 4:
        raise ValueError(
            f"the posterior has {n_draw} draw(s) per chain; bridge sampling needs at least 4 "
            "(half fit the proposal, half enter the iteration)"
        )
    n_half = n_draw // 2
    X_fit = X[:, :n_half].reshape(-1, d)
    X_iter = X[:, n_half:].reshape(-1, d)
    if X_fit.shape[0] <= d:
        raise ValueError(
            f"{X_fit.shape[0]} draws fit the proposal but the model has {d} unconstrained "
            "parameters: its covariance needs more draws than parameters; pass more draws"
        )
    n1 = X_iter.shape[0]
    n2 = n1 if proposal_draws is None else proposal_draws
    iter_shape = (n_chain, n_draw - n_half)

    # ---- proposal and densities
    proposal = _fit_proposal(X_fit)
    Z = rng.standard_normal((n2, d))
    log_q_draws, log_prior_all, log_lik_all = _log_joint(density, X.reshape(-1, d))
    log_q_iter = log_q_draws.reshape(n_chain, n_draw)[:, n_half:].reshape(-1)
    if method == "normal":
        t1 = log_q_iter
        g1 = proposal.log_density(X_iter)
        X_prop = proposal.mean + Z @ proposal.chol.T
        t2 = _log_joint(density, X_prop)[0]
        g2 = _log_std_normal(Z) - proposal.log_det_chol
    else:  # warp3: bridge the symmetrised standardised posterior to N(0, I)
        offset = proposal.log_det_chol - np.log(2.0)
        mirrored = _log_joint(density, 2 * proposal.mean - X_iter)[0]
        t1 = offset + np.logaddexp(log_q_iter, mirrored)
        g1 = _log_std_normal(proposal.standardise(X_iter))
        LZ = Z @ proposal.chol.T
        t2 = offset + np.logaddexp(
            _log_joint(density, proposal.mean - LZ)[0], _log_joint(density, proposal.mean + LZ)[0]
        )
        g2 = _log_std_normal(Z)
    t_evaluation = time.perf_counter()

    nonfinite_post = int(np.sum(~np.isfinite(log_q_iter)))
    nonfinite_prop = int(np.sum(~np.isfinite(t2)))
    if nonfinite_post:
        warn(
            messages,
            f"{nonfinite_post} of {n1} posterior draws have a non-finite log density: the draws "
            "may not come from this model's posterior (or a different parameterisation)",
        )
    if np.isposinf(t2).any() or np.isposinf(t1).any():
        raise ValueError("the log density is +inf at some draws: the posterior is improper")

    # ---- effective sample size, iteration, error
    ess = _ess(log_q_iter.reshape(iter_shape))
    n_eff = min(ess, n1) if np.isfinite(ess) and ess > 0 else float(n1)
    log_s1 = float(np.log(n_eff / (n_eff + n2)))
    log_s2 = float(np.log(n2 / (n_eff + n2)))
    l1, l2 = t1 - g1, t2 - g2
    result = _iterate(l1, l2, log_s1, log_s2, max_iter, tol)
    log_z = result.log_evidence
    if np.isfinite(log_z):
        re2_prop, re2_post, ess_f2 = _relative_error(
            log_z, t1, g1, t2, g2, log_s1, log_s2, iter_shape
        )
    else:
        re2_prop = re2_post = ess_f2 = np.nan
    re2 = re2_prop + re2_post
    cv = float(np.sqrt(re2))
    t_iteration = time.perf_counter()

    # ---- soft problems
    divergences = _divergences(idata)
    rhat = _rhat(log_q_draws.reshape(n_chain, n_draw))
    if not result.converged:
        warn(
            messages,
            f"the bridge iteration did not converge in {max_iter} iterations (last relative "
            f"change {result.final_change:.3g} > tol={tol:g}); the estimate "
            f"{log_z:.4f} is the last iterate. Raise max_iter or check the draws.",
        )
    if not np.isfinite(log_z):
        warn(messages, "the bridge estimate is not finite: the proposal and the posterior do "
             "not overlap (check the draws and the model)")
    elif not cv <= MAX_CV:
        warn(
            messages,
            f"the relative error of the evidence is large: sqrt(RE²) = {cv:.3g} > {MAX_CV} "
            "(Frühwirth-Schnatter 2004). Use more draws, or method='warp3' for skewed "
            "posteriors.",
        )
    if divergences:
        warn(messages, f"{divergences} divergent NUTS transitions in the posterior draws: they "
             "may not represent the posterior, which biases the evidence. Reparameterise (e.g. "
             "non-centred) or raise target_accept.")
    if np.isfinite(rhat) and rhat > MAX_RHAT:
        warn(messages, f"the chains disagree: R-hat of the log posterior density is {rhat:.3f} "
             f"> {MAX_RHAT}; the draws may not represent the posterior (several modes?)")
    if np.isfinite(ess) and ess < MIN_ESS:
        warn(messages, f"only {ess:.0f} effective posterior draws enter the iteration "
             f"(< {MIN_ESS}); the evidence and its error are unreliable. Use more draws.")

    diagnostics = pd.DataFrame(
        {
            "method": [method],
            "iterations": [result.iterations],
            "converged": [result.converged],
            "final_change": [result.final_change],
            "n_chains": [n_chain],
            "n_fit": [X_fit.shape[0]],
            "n_iter": [n1],
            "n_proposal": [n2],
            "ess": [ess],
            "ess_f2": [ess_f2],
            "s1": [float(np.exp(log_s1))],
            "s2": [float(np.exp(log_s2))],
            "rhat_log_posterior": [rhat],
            "proposal_log_det": [2 * proposal.log_det_chol],
            "proposal_condition_number": [proposal.condition_number],
            "proposal_jitter": [proposal.jitter],
            "re2_proposal": [re2_prop],
            "re2_posterior": [re2_post],
            "re2": [re2],
            "cv": [cv],
            "nonfinite_posterior": [nonfinite_post],
            "nonfinite_proposal": [nonfinite_prop],
            "divergences": [divergences],
        },
        index=pd.Index([0], name="bridge"),
    )
    names = [rv.name for rv in model.free_RVs + model.deterministics]
    draws_out = {
        name: np.asarray(posterior[name].transpose("chain", "draw", ...).values)
        for name in names
        if name in posterior.data_vars
    }
    sample_stats = {
        "log_prior": log_prior_all.reshape(n_chain, n_draw),
        "log_likelihood": log_lik_all.reshape(n_chain, n_draw),
    }
    settings = {
        "method": method,
        "sampled": sampled,
        "draws": int(n_draw),
        "tune": tune if sampled else None,
        "sample_kwargs": {k: str(v) for k, v in sample_kwargs.items()} if sampled else None,
        "chains": int(n_chain),
        "proposal_draws": int(n2),
        "max_iter": max_iter,
        "tol": float(tol),
        "backend": backend,
        "random_seed": random_seed if isinstance(random_seed, (int, type(None))) else "given",
        "dim": int(d),
    }
    t_end = time.perf_counter()
    return EvidenceResult(
        method="bridge",
        log_evidence=float(log_z),
        se=cv,
        model_name=model.name or "",
        diagnostics=diagnostics,
        posterior=draws_out,
        sample_stats=sample_stats,
        estimates={
            "re2": float(re2),
            "cv": cv,
            "log_evidence_first_iteration": float(result.path[0]),
        },
        settings=settings,
        timing={
            "density": t_density - t_start,
            "sampling": t_sampling - t_density,
            "evaluation": t_evaluation - t_sampling,
            "iteration": t_iteration - t_evaluation,
            "total": t_end - t_start,
        },
        warnings=messages,
    )


def _divergences(idata) -> int:
    """Number of divergent transitions recorded in ``idata``'s sample_stats (0 if none)."""
    stats = None
    if hasattr(idata, "children") and "sample_stats" in getattr(idata, "children", {}):
        stats = idata["sample_stats"].to_dataset()
    elif hasattr(idata, "groups") and "sample_stats" in idata.groups():
        stats = idata["sample_stats"]
    if stats is None or "diverging" not in stats:
        return 0
    return int(np.asarray(stats["diverging"].values).sum())
