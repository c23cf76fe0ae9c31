"""Bridge sampling from posterior draws (Meng & Wong 1996; Gronau et al. 2017), as in R's
``bridgesampling``: the estimator Bayesian statisticians using Stan or R compare against."""

from __future__ import annotations

import contextlib
import logging
import math
import numbers
import time
from typing import NamedTuple

import numpy as np
import pandas as pd
import pymc as pm
import xarray as xr
from scipy.special import logsumexp

from pymc_evidence import _compat, _label_switching
from pymc_evidence._constants import LOG_2PI
from pymc_evidence._random import as_generator
from pymc_evidence._validation import choice, integer, number, resolve_model
from pymc_evidence.density import check_prior_draws, get_density
from pymc_evidence.results import BridgeResult, warn
from pymc_evidence.symmetry import mlp_symmetry, resolve_layers, sampling_layers

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
#: Tags the stream of the chains' starting points, drawn from pm.sample's seed.
_STARTS_SPAWN_KEY = (0x73746172,)  # "star"


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
    elif _compat.is_arviz_data(idata):
        groups = _compat.arviz_groups(idata)
        posterior = groups.get("posterior")
        if posterior is None:
            posterior = _compat.own_dataset(idata)  # the posterior node itself (ArviZ 1.x)
        if posterior is None or not {"chain", "draw"} <= set(posterior.dims):
            raise ValueError(
                f"idata has no 'posterior' group (its groups: {sorted(groups) or 'none'}); "
                "pass the output of pm.sample"
            )
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

    An int (or None) goes to ``pm.sample`` unchanged; the proposal's stream and the chains'
    starting points are spawned from the same seed under keys of their own. A Generator, SeedSequence or sequence
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


def _sample_posterior(model, density, draws, tune, chains, seed, progressbar, sample_kwargs,
                      starts):
    """NUTS draws: ``pm.sample`` on one core with the density's compile mode, each chain
    started at its own exact prior draw (``starts``, unconstrained): chains that start apart
    can find different modes, which R-hat then reveals, where PyMC's default starts every
    chain near one point (and an ordered vector's default start, all zeros, has no density)."""
    initial = density.to_constrained(starts[:chains])
    arguments = dict(
        cores=1,
        nuts_sampler="pymc",
        compute_convergence_checks=False,
        compile_kwargs={"mode": density.mode},
        initvals=[{name: initial[name][c] for name in density.free_names} for c in range(chains)],
    )
    arguments.update(sample_kwargs)
    with _quiet_pymc(not progressbar):
        return pm.sample(
            draws=draws,
            tune=tune,
            chains=chains,
            random_seed=seed,
            progressbar=progressbar,
            model=model,
            **arguments,
        )


def _unconstrained_draws(density, posterior: xr.Dataset) -> np.ndarray:
    """The posterior's draws in the flat unconstrained space, shape (chain, draw, d)."""
    names = density.free_names
    missing = [name for name in names if name not in posterior.data_vars]
    if missing:
        raise ValueError(
            f"the posterior has no draws of free variable(s) {missing} of model "
            f"{density.model.name or '(unnamed)'!r} (it has {sorted(posterior.data_vars)}); "
            "pass draws of every free variable, e.g. pm.sample without var_names"
        )
    n_chain, n_draw = posterior.sizes["chain"], posterior.sizes["draw"]
    draws = {}
    for name in names:
        values = np.asarray(posterior[name].transpose("chain", "draw", ...).values)
        draws[name] = values.reshape((n_chain * n_draw, *values.shape[2:]))
    try:
        flat = density.from_constrained(draws)
    except Exception as err:  # shapes that do not match the model
        found = {name: a.shape[1:] for name, a in draws.items()}
        raise ValueError(
            "the posterior draws do not fit the model's free variables (shapes per draw: "
            f"{found}): {str(err).strip().splitlines()[0]}"
        ) from err
    if flat.shape[1] != density.dim:
        raise ValueError(
            f"the posterior draws map to {flat.shape[1]} unconstrained values per draw, the "
            f"model has {density.dim}: check the draws' shapes"
        )
    outside = ~np.isfinite(flat)
    if outside.any():
        edges = np.cumsum([0, *density.sizes])
        culprits = [name for name, start, stop in zip(names, edges[:-1], edges[1:])
                    if outside[:, start:stop].any()]
        raise ValueError(
            f"{int(outside.any(axis=1).sum())} of {len(flat)} posterior draws lie outside the "
            f"support of {culprits} (their transform to the unconstrained space is not finite): "
            "pass draws of this model"
        )
    return flat.reshape(n_chain, n_draw, density.dim)


def _region(density, domain, around):
    """The points the target is restricted to, as a mask function of the rows of X (None: the
    whole space): the label-switching ``domain`` (None: none) and the period centred on
    ``around`` (:meth:`~ModelDensity.in_period`)."""
    if domain is None and not density.periodic.size:
        return None

    def inside(X):
        mask = density.in_period(X, around)
        if domain is not None:
            mask &= _label_switching.in_domain(density, domain, X)
        return mask

    return inside


def _log_joint(density, X: np.ndarray, region=None):
    """Log joint (−inf where NaN, and outside a :func:`_region`), log prior and log likelihood
    at the rows of X, in chunks."""
    prior, lik = [], []
    for start in range(0, X.shape[0], CHUNK):
        values = density(X[start : start + CHUNK])
        prior.append(values.log_prior)
        lik.append(values.log_likelihood)
    prior, lik = np.concatenate(prior), np.concatenate(lik)
    log_joint = np.where(np.isnan(prior + lik), -np.inf, prior + lik)
    if region is not None:
        log_joint[~region(X)] = -np.inf
    return log_joint, prior, lik


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
    ess_f2 = _compat.ess(f2.reshape(shape), method="mean")  # the ESS of a mean, not rank-based
    var_f2 = float(np.var(f2, ddof=1))
    if var_f2 == 0.0:
        term2 = 0.0
    else:
        n_eff = ess_f2 if np.isfinite(ess_f2) and ess_f2 > 0 else f2.size
        term2 = var_f2 / (n_eff * np.mean(f2) ** 2)
    return term1, term2, ess_f2


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
    mlp_layers="auto",
    random_seed=None,
    progressbar: bool = True,
    backend: str = "c",
) -> BridgeResult:
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
        through the model's transforms to the unconstrained space (a draw outside a variable's
        support is an error that names the variable). Without it, draws come from
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
    mlp_layers : "auto", MLPLayer, list of MLPLayer or None, default "auto"
        The model's MLP hidden layers (see :class:`~pymc_evidence.MLPLayer`), whose units
        permuting and flipping in sign gives every mode 2^h h! copies (tanh) that NUTS's chains
        do not move between: the draws are moved to their copy nearest the highest draw and the
        log copies added, as for the symmetries below. ``"auto"``: the layers recognised in the
        model's graph whose symmetries leave the density unchanged at prior draws, as in
        :func:`thermodynamic`. With several layers the one with the most copies is counted,
        and a warning gives the others' log copies, by which the estimate can be low. None:
        no layers.
    random_seed : int, Generator, SeedSequence or None
        Seeds NUTS (an int goes to ``pm.sample`` unchanged) and the proposal draws.
    progressbar : bool, default True
        Show ``pm.sample``'s progress bar and messages.
    backend : {"c", "numba"}, default "c"
        PyTensor backend for the compiled density (and for NUTS when sampling).

    Returns
    -------
    BridgeResult
        ``method="bridge"``, ``se`` = :math:`\sqrt{\mathrm{RE}^2}`. ``diagnostics`` has one row
        (index ``"bridge"``): ``method``, ``iterations``, ``converged``, ``final_change``,
        ``n_chains``, ``n_fit`` (draws fitting the proposal), ``n_iter`` (:math:`N_1`),
        ``n_proposal`` (:math:`N_2`), ``ess`` (:math:`N_{\text{eff}}`: ArviZ ESS of the log
        posterior density over the iteration half), ``ess_f2``, ``s1``, ``s2``,
        ``rhat_log_posterior``, ``proposal_log_det`` (:math:`\log\det\hat\Sigma`),
        ``proposal_condition_number``, ``proposal_jitter``, ``re2_proposal`` and
        ``re2_posterior`` (the two terms of RE²), ``re2``, ``cv`` (:math:`\sqrt{\mathrm{RE}^2}`),
        ``nonfinite_posterior``, ``nonfinite_proposal`` (draws with a non-finite log density),
        ``divergences``. The fields ``re2``, ``cv`` and ``log_evidence_first_iteration`` repeat
        the error and the first iteration's estimate;
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

    Symmetric copies: when some free variables, permuted together along one axis (a
    mixture's ``K`` exchangeable components) or changing sign together (``a`` and ``b`` of
    ``y ~ N(a·b, σ)``), leave the log prior and the log likelihood unchanged at prior draws,
    and for an MLP layer's units (``mlp_layers``), every draw is moved to its copy nearest the
    highest draw, the target is the posterior restricted to that domain, and the log of the
    number of copies (:math:`K!`, 2, :math:`2^h h!`) is added:
    the domain's copies tile the space, so :math:`Z = K! \int_{\text{domain}} q`, however
    many copies NUTS visited (``settings["symmetries"]`` lists them).

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
    draws, tune, chains, max_iter, proposal_draws, sample_kwargs = _validate_arguments(
        method, draws, tune, chains, max_iter, proposal_draws, tol, sample_kwargs)
    posterior = None if idata is None else _posterior_dataset(idata)
    model = resolve_model(model)
    density = get_density(model, backend=backend)
    sample_seed, rng = _seeds(random_seed)
    layers = resolve_layers(mlp_layers, model, density)
    layer, log_uncounted = _counted_layer(layers, density)
    t_density = time.perf_counter()

    sampled = posterior is None
    if sampled:
        # pm.sample's own failure at a broken density does not say what is wrong; a stream of
        # pm.sample's seed leaves the proposal's draws untouched.
        stream = np.random.SeedSequence(sample_seed, spawn_key=_STARTS_SPAWN_KEY)
        starts = density.prior_draws(np.random.default_rng(stream), max(chains, 64))
        check_prior_draws(density, starts, *density.log_densities(starts))
        idata = _sample_posterior(
            model, density, draws, tune, chains, sample_seed, progressbar, sample_kwargs, starts
        )
        posterior = _posterior_dataset(idata)
    t_sampling = time.perf_counter()

    X = _unconstrained_draws(density, posterior)  # (chain, draw, d)
    draw_values = _log_joint(density, X.reshape(-1, X.shape[2]))
    # Label switching and sign flips: NUTS's chains each hold one copy of a mode, and a bridge
    # over them would count those copies alone. The target is the posterior restricted to the
    # copies nearest the highest draw, Z = copies × ∫_domain p, the draws moved into it (where
    # their log densities are the same).
    symmetries = _label_switching.find_symmetries(density, layer=layer)
    flat, domain = X.reshape(-1, X.shape[2]), None
    if symmetries:
        domain = _label_switching.domain_around(density, symmetries,
                                                flat[np.argmax(draw_values[0])])
        flat = _label_switching.canonical(density, domain, flat)
    # Circular variables: the log density repeats every 2π and the evidence is its integral
    # over one period, the one centred on the highest draw, where the draws are moved.
    highest = flat[np.argmax(draw_values[0])]
    X = density.wrap(flat, highest).reshape(X.shape)
    region = _region(density, domain, highest)
    halves = _halves(X, proposal_draws)
    proposal = _fit_proposal(halves.fit)
    terms = _bridge_terms(method, density, proposal, X, draw_values, halves, rng, region)
    t_evaluation = time.perf_counter()

    if np.isposinf(terms.t2).any() or np.isposinf(terms.t1).any():
        raise ValueError("the log density is +inf at some draws: the posterior is improper")
    ess = _compat.ess(terms.log_q_iter.reshape(halves.iter_shape))
    log_s1, log_s2 = _sample_weights(ess, halves)
    iteration = _iterate(terms.t1 - terms.g1, terms.t2 - terms.g2, log_s1, log_s2, max_iter, tol)
    error = _error(iteration.log_evidence, terms, log_s1, log_s2, halves.iter_shape)
    log_copies = _label_switching.log_copies(symmetries)
    t_iteration = time.perf_counter()

    divergences = _divergences(idata)
    rhat = _compat.rhat(terms.log_q_draws.reshape(X.shape[:2]))
    messages: list[str] = []
    if log_uncounted:
        warn(messages, f"the model has several MLP hidden layers; bridge counts the symmetric "
             f"copies of one ({layer.weights!r}, {_label_switching.log_copies(symmetries[:1]):.1f}"
             f" nats) and not the others' ({log_uncounted:.1f} nats), between which NUTS does "
             "not move: the estimate can be low by up to that much. Use thermodynamic or nested.")
    _warn_on_soft_problems(messages, terms, halves, iteration, error.cv, divergences, rhat, ess,
                           max_iter, tol)
    diagnostics = _diagnostics(method, X, halves, proposal, terms, iteration, error, ess,
                               (log_s1, log_s2), rhat, divergences)
    settings = {
        "method": method,
        "sampled": sampled,
        "draws": int(X.shape[1]),
        "tune": tune if sampled else None,
        "sample_kwargs": {k: str(v) for k, v in sample_kwargs.items()} if sampled else None,
        "chains": int(X.shape[0]),
        "proposal_draws": int(halves.n2),
        "max_iter": max_iter,
        "tol": float(tol),
        "backend": backend,
        "random_seed": random_seed if isinstance(random_seed, (int, type(None))) else "given",
        "dim": int(X.shape[2]),
        "symmetries": [c.setting() for c in symmetries],
        "mlp_layers": [vars(layer) for layer in layers] or None,
    }
    t_end = time.perf_counter()
    return BridgeResult(
        log_evidence=float(iteration.log_evidence + log_copies),
        se=error.cv,
        model_name=model.name or "",
        diagnostics=diagnostics,
        posterior=_named_draws(model, posterior),
        sample_stats={
            "log_prior": terms.log_prior.reshape(X.shape[:2]),
            "log_likelihood": terms.log_likelihood.reshape(X.shape[:2]),
        },
        re2=float(error.re2),
        cv=error.cv,
        log_evidence_first_iteration=float(iteration.path[0] + log_copies),
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


# --------------------------------------------------------------------------- steps
def _counted_layer(layers, density):
    """The hidden layer whose copies the bridge counts (:func:`sampling_layers`: one layer's
    nearest copy is exact, several layers' are not) and the log copies of the others."""
    if not layers:
        return None, 0.0
    shapes = dict(zip(density.names, density.shapes))
    [counted] = sampling_layers(density, layers)
    log_uncounted = sum(math.log(mlp_symmetry(l.hidden_units(shapes), l.activation))
                        for l in layers if l is not counted)
    return counted, float(log_uncounted)


def _validate_arguments(method, draws, tune, chains, max_iter, proposal_draws, tol,
                        sample_kwargs):
    """Raise on a bad argument before any work; returns the integers and ``sample_kwargs``
    as a dict."""
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
    return draws, tune, chains, max_iter, proposal_draws, sample_kwargs


class _Halves(NamedTuple):
    """The draws split in time: the first half of every chain fits the proposal, the second
    half enters the iteration (Overstall & Forster 2010)."""

    fit: np.ndarray  # (chains × first half, d)
    iterate: np.ndarray  # (N1, d)
    n_half: int  # draws per chain in the first half
    n1: int  # posterior draws in the iteration
    n2: int  # proposal draws
    iter_shape: tuple  # (chain, draw) of the iteration half


def _halves(X: np.ndarray, proposal_draws: int | None) -> _Halves:
    n_chain, n_draw, d = X.shape
    if n_draw < 4:
        raise ValueError(
            f"the posterior has {n_draw} draw(s) per chain; bridge sampling needs at least 4 "
            "(half fit the proposal, half enter the iteration)"
        )
    n_half = n_draw // 2
    fit = X[:, :n_half].reshape(-1, d)
    iterate = X[:, n_half:].reshape(-1, d)
    if fit.shape[0] <= d:
        raise ValueError(
            f"{fit.shape[0]} draws fit the proposal but the model has {d} unconstrained "
            "parameters: its covariance needs more draws than parameters; pass more draws"
        )
    n1 = iterate.shape[0]
    n2 = n1 if proposal_draws is None else proposal_draws
    return _Halves(fit, iterate, n_half, n1, n2, (n_chain, n_draw - n_half))


def _sample_weights(ess: float, halves: _Halves) -> tuple[float, float]:
    """log s1, log s2 of the optimal bridge, with the posterior draws counted by their ESS."""
    n_eff = min(ess, halves.n1) if np.isfinite(ess) and ess > 0 else float(halves.n1)
    return float(np.log(n_eff / (n_eff + halves.n2))), float(np.log(halves.n2 / (n_eff + halves.n2)))


class _Error(NamedTuple):
    re2_proposal: float
    re2_posterior: float
    re2: float
    cv: float  # √RE², the reported SE of log Ẑ
    ess_f2: float


def _error(log_z, terms, log_s1, log_s2, iter_shape) -> _Error:
    """The relative error of Ẑ (NaN when Ẑ is not finite)."""
    if np.isfinite(log_z):
        re2_prop, re2_post, ess_f2 = _relative_error(
            log_z, terms.t1, terms.g1, terms.t2, terms.g2, log_s1, log_s2, iter_shape
        )
    else:
        re2_prop = re2_post = ess_f2 = np.nan
    re2 = re2_prop + re2_post
    return _Error(re2_prop, re2_post, re2, float(np.sqrt(re2)), ess_f2)


def _diagnostics(method, X, halves, proposal, terms, iteration, error, ess, log_s, rhat,
                 divergences) -> pd.DataFrame:
    """The one-row diagnostics table (index ``"bridge"``)."""
    row = {
        "method": method,
        "iterations": iteration.iterations,
        "converged": iteration.converged,
        "final_change": iteration.final_change,
        "n_chains": X.shape[0],
        "n_fit": halves.fit.shape[0],
        "n_iter": halves.n1,
        "n_proposal": halves.n2,
        "ess": ess,
        "ess_f2": error.ess_f2,
        "s1": float(np.exp(log_s[0])),
        "s2": float(np.exp(log_s[1])),
        "rhat_log_posterior": rhat,
        "proposal_log_det": 2 * proposal.log_det_chol,
        "proposal_condition_number": proposal.condition_number,
        "proposal_jitter": proposal.jitter,
        "re2_proposal": error.re2_proposal,
        "re2_posterior": error.re2_posterior,
        "re2": error.re2,
        "cv": error.cv,
        "nonfinite_posterior": int(np.sum(~np.isfinite(terms.log_q_iter))),
        "nonfinite_proposal": int(np.sum(~np.isfinite(terms.t2))),
        "divergences": divergences,
    }
    return pd.DataFrame({k: [v] for k, v in row.items()}, index=pd.Index([0], name="bridge"))


class _Terms(NamedTuple):
    """The bridge's log densities: t (target) and g (proposal) at the posterior draws of the
    iteration (1) and at the proposal draws (2); and the log joint, prior and likelihood at
    every posterior draw."""

    t1: np.ndarray
    g1: np.ndarray
    t2: np.ndarray
    g2: np.ndarray
    log_q_draws: np.ndarray  # log joint at every posterior draw (NaN as -inf)
    log_q_iter: np.ndarray  # the same at the iteration half
    log_prior: np.ndarray
    log_likelihood: np.ndarray


def _bridge_terms(method, density, proposal: _Proposal, X, draw_values, halves: _Halves, rng,
                  region) -> _Terms:
    """The target and proposal log densities of ``method`` ("normal", or "warp3": the
    symmetrised standardised posterior bridged to N(0, I), Meng & Schilling 2002); the target
    is restricted to ``region`` (:func:`_region`; None: none). ``draw_values`` are the
    posterior draws' log joint, prior and likelihood (:func:`_log_joint`)."""
    n_chain, n_draw, d = X.shape
    Z = rng.standard_normal((halves.n2, d))
    log_q_draws, log_prior, log_lik = draw_values
    log_q_iter = log_q_draws.reshape(n_chain, n_draw)[:, halves.n_half:].reshape(-1)
    if method == "normal":
        t1 = log_q_iter
        g1 = proposal.log_density(halves.iterate)
        t2 = _log_joint(density, proposal.mean + Z @ proposal.chol.T, region)[0]
        g2 = _log_std_normal(Z) - proposal.log_det_chol
    else:
        offset = proposal.log_det_chol - np.log(2.0)
        mirrored = _log_joint(density, 2 * proposal.mean - halves.iterate, region)[0]
        t1 = offset + np.logaddexp(log_q_iter, mirrored)
        g1 = _log_std_normal(proposal.standardise(halves.iterate))
        LZ = Z @ proposal.chol.T
        t2 = offset + np.logaddexp(_log_joint(density, proposal.mean - LZ, region)[0],
                                   _log_joint(density, proposal.mean + LZ, region)[0])
        g2 = _log_std_normal(Z)
    return _Terms(t1, g1, t2, g2, log_q_draws, log_q_iter, log_prior, log_lik)


def _warn_on_soft_problems(messages, terms: _Terms, halves: _Halves, iteration: _Iteration,
                           cv, divergences, rhat, ess, max_iter, tol):
    """One warning per soft problem: non-finite draws, no convergence, a large relative
    error, divergences, chains that disagree, too few effective draws."""
    def say(text):
        warn(messages, text, stacklevel=5)

    nonfinite = int(np.sum(~np.isfinite(terms.log_q_iter)))
    if nonfinite:
        say(f"{nonfinite} of {halves.n1} posterior draws have a non-finite log density: the "
            "draws may not come from this model's posterior (or a different parameterisation)")
    log_z = iteration.log_evidence
    if not iteration.converged:
        say(f"the bridge iteration did not converge in {max_iter} iterations (last relative "
            f"change {iteration.final_change:.3g} > tol={tol:g}); the estimate "
            f"{log_z:.4f} is the last iterate. Raise max_iter or check the draws.")
    if not np.isfinite(log_z):
        say("the bridge estimate is not finite: the proposal and the posterior do "
            "not overlap (check the draws and the model)")
    elif not cv <= MAX_CV:
        say(f"the relative error of the evidence is large: sqrt(RE²) = {cv:.3g} > {MAX_CV} "
            "(Frühwirth-Schnatter 2004). Use more draws, or method='warp3' for skewed "
            "posteriors.")
    if divergences:
        say(f"{divergences} divergent NUTS transitions in the posterior draws: they "
            "may not represent the posterior, which biases the evidence. Reparameterise (e.g. "
            "non-centred) or raise target_accept.")
    if np.isfinite(rhat) and rhat > MAX_RHAT:
        say(f"the chains disagree: R-hat of the log posterior density is {rhat:.3f} "
            f"> {MAX_RHAT}; the draws may not represent the posterior (several modes?)")
    if np.isfinite(ess) and ess < MIN_ESS:
        say(f"only {ess:.0f} effective posterior draws enter the iteration "
            f"(< {MIN_ESS}); the evidence and its error are unreliable. Use more draws.")


def _named_draws(model, posterior: xr.Dataset) -> dict:
    """The posterior's free variables and deterministics as (chain, draw, ...) arrays."""
    names = [rv.name for rv in model.free_RVs + model.deterministics]
    return {
        name: np.asarray(posterior[name].transpose("chain", "draw", ...).values)
        for name in names
        if name in posterior.data_vars
    }


def _divergences(idata) -> int:
    """Number of divergent transitions recorded in ``idata``'s sample_stats (0 if none)."""
    groups = _compat.arviz_groups(idata) if _compat.is_arviz_data(idata) else {}
    stats = groups.get("sample_stats")
    if stats is None or "diverging" not in stats:
        return 0
    return int(np.asarray(stats["diverging"].values).sum())
