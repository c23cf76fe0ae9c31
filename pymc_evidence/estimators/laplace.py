"""Laplace's approximation to the evidence at the posterior modes (MacKay 1992; Barber & Bishop
1997 §4), with multi-start mode finding, symmetry correction and MacKay's evidence framework."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from scipy.linalg import solve_triangular
from scipy.special import logsumexp

from pymc_evidence import _label_switching
from pymc_evidence._constants import LOG_2PI
from pymc_evidence._optimize import (
    escape_saddles,
    joint_objective,
    multistart,
    newton_decrement,
    newton_polish,
    fd_hessian,
    HESSIAN_RTOL,
    hessian_mismatch,
    starting_points,
)
from pymc_evidence._random import as_generator
from pymc_evidence._validation import choice, integer, number, resolve_model
from pymc_evidence.density import get_density
from pymc_evidence.estimators import _mackay
from pymc_evidence.results import LaplaceResult, warn
from pymc_evidence.symmetry import (
    MLPLayer, align_units, alignment_map, domain_anchor, is_nearest_copy, log_stabiliser,
    missing_layers_message, mlp_symmetry, resolve_layers, sampling_layers, suggested_layers,
)

__all__ = ["laplace"]

FRAMEWORKS = ("fixed", "mackay")
#: H counts as positive definite when its smallest eigenvalue exceeds this × its largest.
PD_RTOL = 1e-12


@dataclass
class _Mode:
    """One distinct mode and everything the Laplace approximation needs there."""

    x: np.ndarray
    log_prior: float
    log_likelihood: float
    neg_hessian: np.ndarray  # H = −∇∇ log p(θ, D)
    eigenvalues: np.ndarray
    grad: np.ndarray
    starts: list[int]
    optimizer_success: bool
    extra: dict = field(default_factory=dict)  # framework-specific columns
    log_hyper_terms: float = 0.0  # eq. 11's ½ ln(2/γ) terms (MacKay framework)
    log_stabiliser: float = 0.0  # log of the symmetries that fix the mode (its copies: S / that)
    notes: list[str] = field(default_factory=list)

    @property
    def log_joint(self) -> float:
        return self.log_prior + self.log_likelihood

    @property
    def positive_definite(self) -> bool:
        lam = self.eigenvalues
        return bool(lam[0] > PD_RTOL * max(abs(lam[-1]), np.finfo(float).tiny))

    @property
    def log_det(self) -> float:
        """``log det H`` (``Σ log |λ_i|`` when H is not positive definite)."""
        return float(np.sum(np.log(np.abs(self.eigenvalues))))

    @property
    def decrement(self) -> float:
        return newton_decrement(self.grad, self.neg_hessian) if self.positive_definite else np.nan

    @property
    def converged(self) -> bool:
        """At a stationary point: predicted gain < 1e-6 nats (PD) or max |gradient| < 1e-6."""
        if self.positive_definite:
            return self.decrement < 1e-6
        return bool(np.max(np.abs(self.grad)) < 1e-6)

    def log_copies(self, log_symmetry: float) -> float:
        """log of the distinct symmetric copies the mode stands for, ``log S − log |G_θ|``."""
        return log_symmetry - self.log_stabiliser

    def log_evidence(self, log_symmetry: float) -> float:
        """This mode's Laplace evidence (eq. in :func:`laplace`); NaN unless H is PD."""
        if not self.positive_definite or not np.isfinite(self.log_hyper_terms):
            return np.nan
        d = self.x.size
        return (self.log_joint + 0.5 * d * LOG_2PI - 0.5 * self.log_det
                + self.log_hyper_terms + self.log_copies(log_symmetry))


def laplace(
    model=None,
    *,
    restarts: int = 8,
    start=None,
    symmetry: int | None = None,
    mlp_layers="auto",
    framework: str = "fixed",
    groups=None,
    noise: str | None = None,
    merge_distance: float = 1.0,
    draws: int = 0,
    check_draws: int = 1000,
    random_seed=None,
    progressbar: bool = True,
    backend: str = "c",
) -> LaplaceResult:
    r"""Laplace approximation to the log evidence, summed over the posterior's distinct modes.

    At each mode :math:`\theta^*` of the log joint :math:`\log p(\theta, D) = \log p(\theta) +
    \log p(D \mid \theta)` in the model's unconstrained space (prior with the transforms'
    log-Jacobians), with :math:`H = -\nabla\nabla \log p(\theta^*, D)`:

    .. math::

        \log Z_m \approx \log p(\theta^*_m, D) + \frac{d}{2}\log 2\pi
                         - \frac{1}{2}\log\det H_m + \log S,
        \qquad \log Z = \operatorname{logsumexp}_m \log Z_m

    (MacKay 1992, eq. 1; Ghahramani & Rasmussen, lecture 12; Barber's slides, "Laplace's
    method"), where :math:`S` is the number of symmetry-equivalent copies of each mode
    (``symmetry``). With ``mlp_layers`` a mode that some of the symmetries fix (coinciding or
    dead units) stands for :math:`S / |G_{\theta_m}|` distinct copies instead,
    :math:`|G_{\theta_m}|` the number of symmetries that move it by less than
    ``merge_distance`` (counted as described in the user guide's "Modes that are their own
    copies"). Distinct modes are summed as Barber & Bishop (1997, §4) sum the evidences of
    the solutions found from different initialisations.

    With ``framework="mackay"`` the weight-decay precisions :math:`\alpha_k` of Gaussian weight
    groups and the noise precision :math:`\beta` are hyperparameters, re-estimated at each mode
    by Barber & Bishop's eq. 10,

    .. math::

        \alpha_k := \frac{\gamma_k}{\hat w_k^\top \hat w_k}, \qquad
        \frac{1}{\beta} := \frac{\sum_n \lVert y(x_n; \hat w) - t_n\rVert^2}{N - \gamma},
        \qquad \gamma_k = W_k - \alpha_k \operatorname{Tr}_k(A^{-1}),

    and the evidence is eq. 11,

    .. math::

        \log Z_m \approx \log p(D \mid \hat\alpha, \hat\beta)
            + \frac{1}{2}\sum_k \ln\frac{2}{\gamma_k} + \frac{1}{2}\ln\frac{2}{N - \gamma}
            + \log S,

    with :math:`\log p(D \mid \hat\alpha, \hat\beta)` the Laplace evidence above at the
    re-estimated precisions, i.e. :math:`-E(\hat w) - \tfrac12 \ln|A| + \tfrac12\sum_k W_k
    \ln\alpha_k + \tfrac N2 \ln \beta - \tfrac N2 \ln 2\pi`.

    Parameters
    ----------
    model : pymc.Model, optional
        The model; taken from the ``with`` context when omitted. Continuous free variables
        only (gradients are needed).
    restarts : int, default 8
        Number of optimisations started from independent exact prior draws.
    start : dict or array_like, optional
        Extra starting point(s), optimised before the prior draws: a dict of unconstrained
        value-variable values (like ``model.initial_point()``), a flat vector (d,) or a matrix
        (m, d).
    symmetry : int, optional
        Number :math:`S \ge 1` of equivalent copies of every mode; :math:`\log S` is added to
        each mode's log evidence. Default: the product of :func:`mlp_symmetry` over
        ``mlp_layers`` when given; else, with ``framework="fixed"``, the copies made by the
        symmetries found in the log density (checked at prior draws): :math:`K!` per set of
        exchangeable components (a mixture's: free variables permuted together along one
        axis) and 2 per set of free variables that change sign together (``a`` and ``b`` of
        ``y ~ N(a·b, σ)``), the optima moved to the copy nearest the best one's before merging
        (``settings["symmetries"]``); else 1. Each mode's count is then divided by the
        symmetries that fix it. A count given here is used as given, for every mode.
    mlp_layers : "auto", MLPLayer, dict, list of them or None, default "auto"
        Which variables make up the hidden layer(s) of an MLP (see
        :class:`~pymc_evidence.symmetry.MLPLayer`). Optima that are copies of one another under
        permutations and sign flips of hidden units are then merged into one mode, and the
        copies counted. ``"auto"``: the layers recognised in the model's graph whose units
        permuting and sign-flipping leaves the density unchanged at prior draws, as in
        :func:`thermodynamic`. None: no layers (a model that looks like an MLP is then warned
        about, with the log copies left out).
    framework : {"fixed", "mackay"}, default "fixed"
        ``"fixed"``: the Laplace approximation of the model exactly as written (hyperparameters
        that are free variables are integrated over by the Laplace approximation like any other
        parameter). ``"mackay"``: MacKay's evidence framework, eq. 10–11, described above.
    groups : dict or list, optional
        ``framework="mackay"`` only: the weight groups sharing one precision
        :math:`\alpha_k`, as ``{"group": ["var", ...]}`` or a list of variable names (one group
        each; the default: every free variable its own group). Every free variable must belong
        to a group and have a zero-mean Gaussian prior with a constant sigma shared by its
        group (checked numerically); the model's sigmas give the starting precisions.
    noise : str, optional
        ``framework="mackay"`` only: name of the observed ``pm.Normal`` (constant sigma, the
        model's only likelihood term) whose precision :math:`\beta` is re-estimated. Without it
        the likelihood is kept as written (e.g. classification) and the
        :math:`\tfrac12 \ln(2/(N-\gamma))` term is dropped. :math:`N` is the number of scalar
        observations (cases × outputs).
    merge_distance : float, default 1.0
        Two optima (after aligning MLP symmetries) are one mode when their Mahalanobis distance
        :math:`\sqrt{\delta^\top H \delta}` in the better mode's Hessian is below this.
    draws : int, default 0
        If positive, draws from the Laplace mixture (each mode's Gaussian, weighted by its
        evidence), mapped to the constrained space, are stored as ``result.posterior``.
    check_draws : int, default 1000
        Draws from the Laplace mixture used to check it against the model (``framework="fixed"``
        only; 0 skips): importance sampling with the mixture as proposal,

        .. math::

            \hat Z_{\mathrm{IS}} = S \cdot \frac{1}{N} \sum_{i=1}^N
                \frac{p(\theta_i, D)}{q(\theta_i)}, \qquad \theta_i \sim q,

        is unbiased for the evidence whatever the fit, and its weights' effective sample size
        measures the fit. With ``mlp_layers`` (and no ``symmetry``) only the draws in one
        copy's domain count (the sum then runs over them, still divided by :math:`N`), so that
        the check holds also where copies of a mode overlap; the ESS is of those draws. The
        Laplace value is flagged when the two disagree by more than one nat or the ESS is
        below 10 % of the draws (reported as ``importance_log_evidence`` and
        ``importance_ess``).
    random_seed : int, Generator or None
        Seeds the prior draws used as starting points (and ``draws``, ``check_draws``).
    progressbar : bool, default True
        Show a progress bar over the optimisations.
    backend : {"c", "numba"}, default "c"
        PyTensor backend for the compiled density.

    Returns
    -------
    LaplaceResult
        ``method="laplace"``, ``se=0`` (the approximation's error is not a sampling error).
        ``diagnostics`` has one row per distinct mode (index ``"mode"``, best first):
        ``log_evidence`` (the mode's contribution incl. the log of its ``copies``; NaN if
        excluded),
        ``weight`` (its share of :math:`Z`), ``log_joint``, ``log_prior``, ``log_likelihood``,
        ``log_det_H``, ``min_eigenvalue``, ``second_eigenvalue``, ``max_eigenvalue`` (of
        :math:`H`), ``gamma`` (effective number of parameters), ``hits`` (optimisations that
        ended there), ``first_start``, ``grad_max``, ``newton_decrement``, ``converged``,
        ``positive_definite``, ``included``, ``copies`` (the distinct symmetric copies the
        mode stands for), ``saddle_escapes`` (``framework="fixed"``); with
        ``framework="mackay"`` also ``alpha_<group>``, ``gamma_<group>``, ``beta``,
        ``log_evidence_given_hyper``, ``iterations``, ``hyper_converged``. ``modes`` holds
        the modes' values in the constrained space (leading dimension ``mode``, in the order
        of ``diagnostics``' rows): e.g. the MAP is ``{k: v[0] for k, v in res.modes.items()}``.

    Warns
    -----
    EvidenceWarning
        When a mode's Hessian is not positive definite (a saddle or flat direction: the mode is
        excluded from the sum, its diagnostics still reported), when no positive-definite mode
        was found (the log evidence is then NaN), when an optimisation did not converge, and
        when the hyperparameter re-estimation fails or does not converge.

    Notes
    -----
    1. Draw ``restarts`` exact prior draws (after any ``start`` points) as starting points.
    2. Maximise the unconstrained log joint from each with L-BFGS-B on the compiled gradient,
       then polish with Newton steps on the exact PyTensor Hessian. (``pm.find_MAP`` maximises
       without the Jacobian and so finds a different point.) With ``framework="fixed"``,
       where the polished point is a saddle (:math:`H` has a negative eigenvalue :math:`\lambda`), step
       :math:`\sqrt{2/|\lambda|}` along its eigenvector and climb again, up to 8 times (L-BFGS
       stops wherever the gradient vanishes; an MLP unit with zero outgoing weights, for one,
       can make such a point a saddle).
       With ``framework="mackay"``,
       alternate this with the re-estimation (eq. 10) until the precisions change by less
       than 1e-8 in log.
    3. Merge optima closer than ``merge_distance`` (after aligning MLP unit permutations and
       sign flips); count the hits.
    4. At each mode compute the eigenvalues of :math:`H`. A mode whose :math:`H` has an
       eigenvalue :math:`\le 10^{-12}\,\lambda_{\max}` (saddle, flat direction) has no Gaussian
       approximation: it is reported (``log_det_H`` is then :math:`\sum\log|\lambda_i|`,
       ``min_eigenvalue`` its negative or zero smallest eigenvalue), flagged
       ``included=False`` and left out of the sum, with a warning.
    5. Sum the included modes' evidences by log-sum-exp.

    The effective number of parameters is :math:`\gamma = d - \operatorname{tr}(H^{-1}
    H_{\text{prior}})` with :math:`H_{\text{prior}} = -\nabla\nabla\log p(\theta^*)` (central
    differences of the compiled prior gradient). For a Gaussian prior of precision
    :math:`\alpha` this is MacKay's :math:`\gamma = \sum_i \lambda_i / (\lambda_i + \alpha)`
    (MacKay 1992, eq. 9), :math:`\lambda_i` the eigenvalues of the data term's Hessian: the
    number of parameters determined by the data rather than by the prior.

    Symmetry: an MLP with :math:`h` tanh hidden units has :math:`S = 2^h h!` copies of each
    mode (:func:`mlp_symmetry`). Barber & Bishop's eq. 11 prints ":math:`\ln h! + 2\ln h`";
    we use the count of sign-flip × permutation symmetries, :math:`\ln h! + h\ln 2`. Merging
    copies (``mlp_layers``) and multiplying by :math:`S` go together: each distinct mode is
    counted once and stands for its :math:`S` copies.

    Eq. 11 as printed omits :math:`-\tfrac N2 \ln 2\pi` (the same for every model of the same
    data); it is included here so that the result is comparable with the other estimators.
    Like eq. 11 it leaves out the hyperpriors' densities (assumed broad; footnote 1 of Barber &
    Bishop).

    Examples
    --------
    >>> import numpy as np, pymc as pm
    >>> import pymc_evidence as pm_evidence
    >>> with pm.Model() as model:
    ...     mu = pm.Normal("mu", 0, 1)
    ...     y = pm.Normal("y", mu, 1, observed=[0.3, -0.1, 0.5])
    >>> res = pm_evidence.laplace(model, restarts=2, random_seed=1, progressbar=False)
    >>> round(res.log_evidence, 4)   # exact here: the posterior is Gaussian
    -3.5637

    See Also
    --------
    pymc_evidence.mlp_symmetry, pymc_evidence.bic

    References
    ----------
    MacKay, D. J. C. (1992). Bayesian model comparison and backprop nets. NIPS 4, 839–846.
    Barber, D. and Bishop, C. M. (1997). Bayesian model comparison by Monte Carlo chaining.
    NIPS 9, §4, eq. 10–11.
    Bishop, C. M. (1995). Neural Networks for Pattern Recognition, §10.6, pp. 434–436.
    """
    t_start = time.perf_counter()
    restarts, draws = _validate_arguments(restarts, start, symmetry, framework, groups, noise,
                                          merge_distance, draws)
    check_draws = integer("check_draws", check_draws, 0)
    model = resolve_model(model)
    rng = as_generator(random_seed)
    density = get_density(model, backend=backend)
    layers = resolve_layers(mlp_layers, model, density)
    messages: list[str] = []
    shapes = dict(zip(density.names, density.shapes))
    symmetries = []
    # mlp_layers=None declines the layers: a model that looks like an MLP is warned about.
    if symmetry is None and not layers and not (
            mlp_layers is None and _warn_if_mlp(messages, model, density, shapes)):
        # Label switching, sign flips: else the sum holds only the copies the restarts found.
        symmetries = _label_switching.find_symmetries(density) if framework == "fixed" else []
    counted = symmetry is None and bool(layers or symmetries)
    if symmetry is None:
        symmetry = math.prod(mlp_symmetry(l.hidden_units(shapes), l.activation) for l in layers)
        symmetry *= math.prod(c.count for c in symmetries)
    log_symmetry = math.log(symmetry)  # exact for counts beyond int64 (2^h h! at h ≥ 17)
    t_density = time.perf_counter()

    modes, n_start, domain = _distinct_modes(density, rng, framework, restarts, start, groups,
                                             noise, layers, symmetries, merge_distance,
                                             progressbar, messages)
    if counted:
        for mode in modes:
            if mode.positive_definite:
                mode.log_stabiliser = (
                    log_stabiliser(density, layers, mode.x, mode.neg_hessian, merge_distance)
                    if layers else _label_switching.log_stabiliser(
                        density, symmetries, mode.x, mode.neg_hessian, merge_distance))
    t_modes = time.perf_counter()

    contributions = np.array([m.log_evidence(log_symmetry) for m in modes])
    included = np.isfinite(contributions)
    order = np.argsort(np.where(included, -contributions, np.inf), kind="stable")
    _warn_about_modes(messages, modes, contributions, order)
    log_evidence, weights = _sum_over_modes(contributions, included, messages)

    posterior = None
    if draws and included.any():
        posterior = _laplace_draws(density, [modes[i] for i in order if included[i]],
                                   weights[order][included[order]], draws, rng)
    importance = (np.nan, np.nan, 0)
    if check_draws and framework == "fixed" and included.any():
        importance = _importance_check(
            density, [modes[i] for i in order if included[i]], weights[order][included[order]],
            log_symmetry, check_draws, rng,
            sampling_layers(density, layers) if counted else [], domain if counted else None)
        _warn_on_misfit(messages, log_evidence, *importance, check_draws)
    hyperparameters = {}
    if framework == "mackay" and included.any():
        hyperparameters = {key: float(value) for key, value in modes[order[0]].extra.items()
                           if key.startswith(("alpha_", "beta", "gamma_"))}
    settings = {
        "restarts": restarts,
        "start": None if start is None else "given",
        "symmetry": int(symmetry),
        "mlp_layers": [vars(layer) for layer in layers],
        "symmetries": [c.setting() for c in symmetries],
        "framework": framework,
        "groups": None if framework == "fixed" else _groups_setting(groups),
        "noise": noise,
        "merge_distance": float(merge_distance),
        "draws": draws,
        "check_draws": check_draws,
        "backend": backend,
        "random_seed": random_seed if isinstance(random_seed, (int, type(None))) else "given",
        "dim": density.dim,
    }
    t_end = time.perf_counter()
    return LaplaceResult(
        log_evidence=log_evidence,
        se=0.0,
        model_name=model.name or "",
        diagnostics=_diagnostics(density, modes, contributions, weights, included, order,
                                 log_symmetry),
        posterior=posterior,
        log_evidence_top_mode=float(contributions[order[0]]) if included.any() else np.nan,
        log_symmetry=log_symmetry,
        importance_log_evidence=importance[0],
        importance_ess=importance[1],
        n_modes=len(modes),
        n_optimisations=n_start,
        hyperparameters=hyperparameters,
        settings=settings,
        timing={
            "density": t_density - t_start,
            "modes": t_modes - t_density,
            "total": t_end - t_start,
        },
        warnings=messages,
        modes=density.to_constrained(np.stack([modes[i].x for i in order])) if modes else None,
    )


# --------------------------------------------------------------------------- steps
def _warn_if_mlp(messages: list, model, density, shapes: dict) -> bool:
    """Warn when the model looks like an MLP but ``mlp_layers=None`` and no ``symmetry`` were
    given: the symmetric copies of every mode are then left out of the sum. True if it
    warned."""
    layers = suggested_layers(model, density)
    if not layers:
        return False
    copies = math.prod(mlp_symmetry(l.hidden_units(shapes), l.activation) for l in layers)
    warn(messages, missing_layers_message(
        layers, f"each mode found is one of {copies} symmetric copies, and with "
        "mlp_layers=None (and no symmetry) they are not added: the log evidence is "
        f"{math.log(copies):.2f} nats too low."), stacklevel=4)
    return True


def _validate_arguments(restarts, start, symmetry, framework, groups, noise, merge_distance,
                        draws) -> tuple[int, int]:
    """Raise on a bad argument before any work; returns ``restarts`` and ``draws`` as ints."""
    restarts = integer("restarts", restarts, 0)
    draws = integer("draws", draws, 0)
    choice("framework", framework, FRAMEWORKS)
    if framework == "fixed" and (groups is not None or noise is not None):
        raise ValueError("groups and noise are options of framework='mackay'")
    integer("symmetry", symmetry, 1, optional=True, why=" (a count of equivalent modes)")
    number("merge_distance", merge_distance, low=0)
    if restarts == 0 and start is None:
        raise ValueError("nothing to optimise: give restarts >= 1 or a start point")
    return restarts, draws


def _distinct_modes(density, rng, framework, restarts, start, groups, noise, layers,
                    symmetries, merge_distance, progressbar, messages):
    """The distinct modes (symmetry copies merged), the number of optimisations run and,
    with ``symmetries``, the domain the modes were moved into."""
    if framework == "fixed":
        candidates, n_start, domain = _fixed_modes(density, rng, restarts, start, progressbar,
                                                   symmetries)
    else:
        candidates, n_start = _mackay_modes(
            density, rng, restarts, start, groups, noise, progressbar
        )
        domain = None
    if not candidates:
        raise ValueError(
            f"the log density is not finite at any of the {n_start} starting points: check the "
            "data for NaN and the model's parameterisation (e.g. a scale that can be zero)"
        )
    if n_start > len(candidates):
        warn(messages, f"{n_start - len(candidates)} of {n_start} starting points had a "
             "non-finite log density and were skipped", stacklevel=4)
    if density.periodic.size:  # a mode found a period away is the same mode (its value moved)
        best = max(candidates, key=lambda m: m.log_joint if np.isfinite(m.log_joint) else -np.inf)
        for mode in candidates:
            mode.x = density.wrap(mode.x, best.x)
    return _merge(density, layers, candidates, merge_distance), n_start, domain


def _warn_about_modes(messages, modes, contributions, order):
    """One warning per mode that is left out of the sum or only approximate, by rank."""
    for rank, i in enumerate(order):  # ranks are the diagnostics' row labels
        m = modes[i]
        if m.notes:
            excluded = "" if np.isfinite(contributions[i]) else "; left out of the sum"
            notes = "; ".join(note.rstrip(".") for note in dict.fromkeys(m.notes))
            warn(messages, f"mode {rank}: {notes}{excluded}", stacklevel=4)
        elif not m.positive_definite:
            warn(
                messages,
                f"mode {rank} (log joint {m.log_joint:.4f}, {len(m.starts)} hit(s)): the "
                f"Hessian H = -∇∇ log p is not positive definite (smallest eigenvalue "
                f"{m.eigenvalues[0]:.4g}); the point is a saddle or has a flat direction, so it "
                "has no Laplace approximation and is left out of the sum. More restarts may "
                "find the modes around it.",
                stacklevel=4,
            )
        elif not np.isfinite(contributions[i]):
            warn(messages, f"mode {rank}: its log evidence is not finite; left out of the sum",
                 stacklevel=4)
        elif not m.converged:
            warn(
                messages,
                f"mode {rank}: the optimiser stopped short of the mode (Newton decrement "
                f"{m.decrement:.3g} nats; {m.extra.get('message', '')}); its evidence is "
                "approximate",
                stacklevel=4,
            )


def _sum_over_modes(contributions, included, messages):
    """log Z = log Σ_modes Z_mode over the included modes, and each mode's share of Z."""
    if included.any():
        log_evidence = float(logsumexp(contributions[included]))
        return log_evidence, np.where(included, np.exp(contributions - log_evidence), 0.0)
    warn(messages, "no positive-definite mode was found: the Laplace log evidence is NaN. "
         "Try more restarts or check the model for unidentified directions.", stacklevel=4)
    return np.nan, np.zeros(len(contributions))


# --------------------------------------------------------------------------- helpers
def _fixed_modes(density, rng, restarts, start, progressbar, symmetries):
    """Optimise from every start, polish, climb off saddles, and analyse each optimum
    (framework="fixed"), moved to its copy under ``symmetries`` nearest the best optimum (the
    same mode then looks the same whichever copy the optimiser found)."""
    objective = joint_objective(density)
    starts = starting_points(density, rng, restarts, start)
    optima = multistart(objective, starts, progressbar=progressbar, desc="laplace: modes")
    polished = []
    for opt in optima:
        opt, hess = newton_polish(objective, density.hessian, opt)
        polished.append(escape_saddles(objective, density.hessian, opt, hess))
    domain = None
    if symmetries and polished:
        best = max(polished, key=lambda p: p[0].value if np.isfinite(p[0].value) else -np.inf)
        domain = _label_switching.domain_around(density, symmetries, best[0].x)
    candidates = []
    for opt, hess, escapes in polished:
        if domain is not None and not _label_switching.in_domain(density, domain, opt.x)[0]:
            x = _label_switching.canonical(density, domain, opt.x)[0]
            value, grad = objective(x)
            opt, hess = newton_polish(objective, density.hessian,
                                      opt._replace(x=x, value=value, grad=grad))
        mismatch, fd = hessian_mismatch(density, opt.x, hess)
        notes = []
        if mismatch > HESSIAN_RTOL:
            notes.append(_hessian_note(mismatch, "the finite-difference Hessian is used instead"))
            hess = fd
        values = density(opt.x[None, :])
        candidates.append(
            _Mode(
                x=opt.x,
                log_prior=float(values.log_prior[0]),
                log_likelihood=float(values.log_likelihood[0]),
                neg_hessian=-hess,
                eigenvalues=np.linalg.eigvalsh(-hess),
                grad=opt.grad,
                starts=[opt.start],
                optimizer_success=opt.success,
                extra={"message": opt.message, "saddle_escapes": escapes},
                notes=notes,
            )
        )
    return candidates, len(starts), domain


def _mackay_modes(density, rng, restarts, start, groups, noise, progressbar):
    """Fit MacKay's evidence framework from every start (framework="mackay")."""
    gauss = _mackay.gaussian_groups(density, groups, rng)
    gauss_noise = _mackay.gaussian_noise(density, noise)
    starts = starting_points(density, rng, restarts, start)
    iterator = range(len(starts))
    if progressbar:
        from tqdm.auto import tqdm

        iterator = tqdm(iterator, desc="laplace (mackay): modes")
    candidates = []
    for i in iterator:
        if not np.isfinite(joint_objective(density)(starts[i])[0]):
            continue
        fit = _mackay.fit_mode(density, gauss, gauss_noise, starts[i], start=i)
        extra = {"message": fit.opt.message}
        for name, a, g in zip(gauss.names, fit.alpha, fit.gamma_k):
            extra[f"alpha_{name}"] = float(a)
            extra[f"gamma_{name}"] = float(g)
        if gauss_noise is not None:
            extra["beta"] = float(fit.beta)
        extra["iterations"] = fit.iterations
        extra["hyper_converged"] = fit.hyper_converged
        with np.errstate(invalid="ignore", divide="ignore"):
            hyper = _mackay.occam_hyper_terms(fit, gauss_noise)
        notes = list(fit.notes)
        mismatch, _ = hessian_mismatch(density, fit.opt.x, density.hessian(fit.opt.x))
        if mismatch > HESSIAN_RTOL:  # A is built from it: no fallback, say so
            notes.append(_hessian_note(mismatch, "this mode's evidence may be wrong"))
        mode = _Mode(
            x=fit.opt.x,
            log_prior=fit.log_prior,
            log_likelihood=fit.log_likelihood,
            neg_hessian=fit.neg_hessian,
            eigenvalues=np.linalg.eigvalsh(fit.neg_hessian),
            grad=fit.opt.grad,
            starts=[i],
            optimizer_success=fit.opt.success,
            extra=extra,
            log_hyper_terms=hyper,
            notes=notes,
        )
        candidates.append(mode)
    return candidates, len(starts)


def _hessian_note(mismatch: float, consequence: str) -> str:
    return (f"PyTensor's Hessian disagrees with finite differences of the gradient by "
            f"{mismatch:.2g} of its largest entry; {consequence}. Please report this model")


def _merge(density, layers: list[MLPLayer], candidates: list[_Mode], merge_distance: float):
    """Group optima that are the same mode (up to the layers' symmetries); best first."""
    ordered = sorted(candidates, key=lambda m: -m.log_joint if np.isfinite(m.log_joint) else np.inf)
    modes: list[_Mode] = []
    for cand in ordered:
        for mode in modes:
            x = align_units(density, layers, mode.x, cand.x) if layers else cand.x
            delta = x - mode.x
            if mode.positive_definite:
                same = float(delta @ mode.neg_hessian @ delta) <= merge_distance**2
            else:
                same = np.linalg.norm(delta) <= 1e-6 * (1 + np.linalg.norm(mode.x))
            if same:
                mode.starts.append(cand.starts[0])
                break
        else:
            modes.append(cand)
    return modes


def _gamma(density, mode: _Mode) -> float:
    """Effective number of parameters ``d − tr(H⁻¹ H_prior)`` (``Σ_k γ_k`` for MacKay's
    framework, whose prior is the re-estimated one, not the model's)."""
    if not mode.positive_definite:
        return np.nan
    gamma_k = [v for k, v in mode.extra.items() if k.startswith("gamma_")]
    if gamma_k:
        return float(np.sum(gamma_k))
    h_prior = -fd_hessian(density, mode.x, "prior")
    return float(mode.x.size - np.trace(np.linalg.solve(mode.neg_hessian, h_prior)))


def _diagnostics(
    density, modes, contributions, weights, included, order, log_symmetry
) -> pd.DataFrame:
    rows = []
    for i in order:
        m = modes[i]
        lam = m.eigenvalues
        row = {
            "log_evidence": contributions[i],
            "weight": weights[i],
            "log_joint": m.log_joint,
            "log_prior": m.log_prior,
            "log_likelihood": m.log_likelihood,
            "log_det_H": m.log_det,
            "min_eigenvalue": float(lam[0]),
            "second_eigenvalue": float(lam[1]) if lam.size > 1 else np.nan,
            "max_eigenvalue": float(lam[-1]),
            "gamma": _gamma(density, m),
            "hits": len(m.starts),
            "first_start": min(m.starts),
            "grad_max": float(np.max(np.abs(m.grad))),
            "newton_decrement": m.decrement,
            "converged": m.converged,
            "positive_definite": m.positive_definite,
            "included": bool(included[i]),
            "copies": float(np.round(np.exp(m.log_copies(log_symmetry)))),  # an integer
        }
        for key, value in m.extra.items():
            if key == "message" or key.startswith("_"):
                continue
            row[key] = value
        if "beta" in m.extra or any(k.startswith("alpha_") for k in m.extra):
            row["log_evidence_given_hyper"] = (
                contributions[i] - m.log_hyper_terms - m.log_copies(log_symmetry)
                if included[i] else np.nan
            )
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame.index.name = "mode"
    return frame


def _groups_setting(groups):
    if isinstance(groups, dict):
        return {str(k): [v] if isinstance(v, str) else list(v) for k, v in groups.items()}
    if groups is not None:
        return list(groups)
    return None


def _importance_check(density, modes, weights, log_symmetry, n, rng,
                      domain_layers, domain) -> tuple[float, float, int]:
    """Importance sampling of the evidence with the Laplace mixture q as proposal: log Ẑ_IS,
    the ESS of the weights p(θ, D) / q(θ) and the number of draws that count.

    The mixture covers one copy of each mode, so Ẑ_IS is the symmetry count times the
    estimate. With ``domain_layers`` (the symmetry counted from them) only draws in one copy's
    domain count, the modes aligned into it: ∫_domain p = Z / S for any p the symmetries keep,
    so the check does not rely on the copies being distinct, as the Laplace sum does. The
    domain is the top mode's moved off any point a symmetry fixes (:func:`domain_anchor`), and
    the ESS is that of the draws in it (about n / |G_θ| of the top mode's). With
    a label-switching ``domain`` (:mod:`~pymc_evidence._label_switching`) the draws in it
    count, the modes having been moved into it. With :attr:`~ModelDensity.periodic` columns
    only the draws in the period centred on the top mode count."""
    weights = weights / weights.sum()
    if domain_layers:
        anchor = domain_anchor(modes[0].x)
        modes = [_aligned(density, domain_layers, anchor, mode) for mode in modes]
    X, chols = _mixture_draws(density, modes, weights, n, rng)
    log_q = np.empty((len(modes), n))
    for k, (mode, chol) in enumerate(zip(modes, chols)):
        whitened = (X - mode.x) @ chol  # Lᵀ(x − θ*): its squared norm is (x − θ*)ᵀ H (x − θ*)
        log_q[k] = (np.log(weights[k]) + np.sum(np.log(np.diag(chol)))
                    - 0.5 * density.dim * LOG_2PI - 0.5 * np.sum(whitened**2, axis=1))
    log_prior, log_likelihood = density.log_densities(X)
    log_w = log_prior + log_likelihood - logsumexp(log_q, axis=0)
    log_w = np.where(np.isnan(log_w), -np.inf, log_w)
    inside = density.in_period(X, modes[0].x)
    if domain_layers or domain is not None:
        inside &= (is_nearest_copy(density, domain_layers, anchor, X) if domain_layers
                   else _label_switching.in_domain(density, domain, X))
    log_w, counted = np.where(inside, log_w, -np.inf), int(inside.sum())
    if not np.isfinite(log_w).any():
        return -np.inf, 0.0, counted
    ess = float(np.exp(2 * logsumexp(log_w) - logsumexp(2 * log_w)))
    return float(log_symmetry + logsumexp(log_w) - np.log(n)), ess, counted


def _aligned(density, layers, anchor, mode: _Mode) -> _Mode:
    """The copy of ``mode`` nearest ``anchor``, its Hessian carried along (the symmetry is a
    signed permutation of the coordinates)."""
    index, signs = alignment_map(density, layers, anchor, mode.x)
    hessian = np.outer(signs, signs) * mode.neg_hessian[np.ix_(index, index)]
    return replace(mode, x=signs * mode.x[index], neg_hessian=hessian,
                   grad=signs * mode.grad[index])


def _warn_on_misfit(messages, log_evidence, importance_log_evidence, ess, n, total) -> None:
    if abs(importance_log_evidence - log_evidence) > 1.0 or ess < 0.1 * n:
        counted = (f"{n} draws" if n == total
                   else f"the {n} of {total} draws in the region integrated (one copy's domain "
                        "or period)")
        warn(messages, f"the Laplace approximation does not fit this posterior: importance "
             f"sampling from its Gaussian(s) gives log Z = {importance_log_evidence:.3f} against "
             f"{log_evidence:.3f}, with an effective sample size of {ess:.0f} of {counted}. The "
             "Laplace value may be off by several nats; use thermodynamic or nested for a "
             "number with an error bar.", stacklevel=4)


def _mixture_draws(density, modes, weights, n, rng):
    """``n`` unconstrained draws from the mixture of the modes' Gaussians N(θ*, H⁻¹) with
    ``weights`` (summing to 1), and each mode's Cholesky factor L of H = L Lᵀ."""
    which = rng.choice(len(modes), size=n, p=weights)
    X = np.empty((n, density.dim))
    chols = [np.linalg.cholesky(mode.neg_hessian) for mode in modes]
    for k, (mode, chol) in enumerate(zip(modes, chols)):
        rows = np.flatnonzero(which == k)
        if rows.size == 0:
            continue
        z = rng.standard_normal((rows.size, density.dim))
        X[rows] = mode.x + solve_triangular(chol.T, z.T, lower=False).T  # x = θ* + L⁻ᵀ z
    return X, chols


def _laplace_draws(density, modes, weights, draws, rng):
    """Draws from the mixture of the modes' Gaussians, constrained space, shape (1, draws, ...)."""
    X, _ = _mixture_draws(density, modes, weights / weights.sum(), draws, rng)
    constrained = density.to_constrained(X)
    return {name: value[None, ...] for name, value in constrained.items()}
