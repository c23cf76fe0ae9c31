r"""Nested sampling's PyMC-free core: nested slice sampling (Yallup et al. 2026) in NumPy.

Nested sampling (Skilling 2006) writes the evidence as a one-dimensional integral over the
prior volume X(λ) = ∫_{L(θ)>λ} π(θ) dθ,

.. math::

    Z = \int L(\theta)\,\pi(\theta)\,d\theta = \int_0^1 L(X)\,dX,

and estimates it from n "live" points drawn from the prior: the point of lowest likelihood L*
dies, its volume X* shrinks geometrically (X_i / X_{i−1} ~ Beta(n, 1), E[log] = −1/n), and it is
replaced by a draw from the prior restricted to L > L*. Here the replacement is drawn as in
BlackJAX's nested slice sampling (``blackjax.ns``; Yallup et al. 2026, "Nested slice
sampling"): ``num_delete`` points die per step; as many survivors, picked uniformly, are moved
by ``num_inner_steps`` hit-and-run slice-sampling moves (Neal 2003, §4: stepping out and
shrinkage) on the constrained prior, all chains at once, one batched density call per round;
the directions are drawn from the covariance of the live points.

Three additions to BlackJAX:

* **Clusters** (:func:`_fit_clusters`): when the constrained region splits into separated modes
  the live points' covariance mostly measures the distance between them. The live points are
  then split recursively by 2-means, each chain takes its directions from its own cluster's
  covariance, and is confined to its cluster's cell (the points a Gaussian classifier fitted to
  the clusters assigns to it). A chain is then a slice sampler of π · 1{L > L*} · 1{cell},
  which leaves that density invariant (Neal 2003); the cells partition space, so the chains
  together leave the constrained prior invariant: exact whatever the clustering. The price:
  once the modes are apart no chain crosses between them, so each mode's share of the live
  points is inherited from the survivors and drifts like a neutral random walk, an error in
  the modes' masses (and, when they differ in likelihood, in Z) that the volume simulation
  does not see. More live points shrink it as 1/√n.
* **Symmetries**: ``canonicalise`` maps points to one copy of a symmetric posterior (an MLP's
  permuted hidden units), the copy nearest the live point of highest likelihood at the latest
  cluster fit, before covariances and clusters are estimated; chains start from the canonical
  copy of their starting point, and their moves stay among canonical points (moves into
  another copy are rejected: directions taken from the canonical points are not symmetric,
  and crossing would change the law of the copies the live points represent). Averaging the
  covariances over the symmetries instead would let the moves cross, but it also averages
  away the units' own scales and the correlations between units: on the robot-arm MLP with
  four hidden units such runs came out 18 to 42 nats low. Following the best point keeps the
  copies' borders away from the region the live points are contracting on.
* **Scale moves** (:mod:`pymc_evidence.scale_moves`): with ``scale_pairs``, every slice move
  is followed by one Metropolis move per pair along a non-centred scale's ridge, which leaves
  the likelihood unchanged and so stays inside the constraint. Slice moves along directions
  from the live points' covariance cross that curved ridge in short steps: on the robot-arm MLP
  the precisions barely move otherwise.

The evidence uses the trapezoid rule on the expected log-volumes; its error bar comes from
simulating the volumes (Higson et al. 2018, "Sampling errors in nested sampling parameter
estimation"), next to Skilling's √(H/n). :func:`nested_core` is :func:`nested_core_init`, a loop of
:func:`nested_core_step` and :func:`nested_core_result`; the state after any step,
:class:`NestedState` (arrays and tuples: pickle it to checkpoint), continues a run
bit-identically.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy.linalg import solve_triangular
from scipy.special import logsumexp

from pymc_evidence.scale_moves import initial_widths, propose

__all__ = [
    "Clusters", "NestedRun", "NestedState", "NestedStepInfo", "equal_weight_draws", "kish_ess",
    "nested_core", "nested_core_init", "nested_core_result", "nested_core_step",
]

#: Accept a 2-means split when the Mahalanobis distance between the halves' means, under their
#: pooled covariance, exceeds this. Points spread uniformly over one ball, shell or ellipsoid
#: give 2.6–4.5 (99th percentile < 6 down to 50 points in 20 dimensions; a Gaussian blob 2.7);
#: two balls one radius apart give ≈ 6 (d = 2), 8 (d = 5), 15 (d = 20).
_SPLIT_SEPARATION = 6.0
#: Neal's (2003, §4.1) limit m on stepping out, in direction lengths (whitened units, where
#: the live points have unit covariance and a typical chord is 2√(d+2) long).
_MAX_STEP_OUT = 100
#: Refit the clusters once this fraction of the live points has been replaced: the constrained
#: region shrinks by e^{−0.1} in volume meanwhile, its scale by e^{−0.1/d}.
_ADAPT_FRACTION = 0.1
#: Relative ridge on covariances, so that a cluster of nearly coplanar points still factorises.
_RIDGE = 1e-10


class Clusters(NamedTuple):
    """Clusters of the live points, which shape and confine the slice moves (arrays over c)."""

    mean: np.ndarray  # (c, d)
    cholesky: np.ndarray  # (c, d, d) lower Cholesky factors of the clusters' covariances
    log_weight: np.ndarray  # (c,) log(size share) − ½ log det Σ_c: the classifier's constants
    adapted_at: int  # NestedState.n_replaced when fitted
    reference: np.ndarray | None  # (d,) live point of highest log L then: canonicalise's copy


class NestedStepInfo(NamedTuple):
    """What one step of :func:`nested_core_step` did; the dead points in ascending log L."""

    dead: np.ndarray  # (k, d) the points that died
    dead_log_likelihood: np.ndarray  # (k,)
    dead_log_prior: np.ndarray  # (k,)
    dead_log_likelihood_birth: np.ndarray  # (k,) threshold each was drawn above (−inf: prior)
    log_threshold: float  # L*, the largest log L among the dead: the new points exceed it
    log_x: float  # expected log prior volume inside L* after the step
    log_z: float  # log evidence of all dead points so far
    log_z_live: float  # log X · mean L of the live points: the evidence still ahead
    max_log_likelihood: float  # of the live points after the step
    n_evaluations: int  # points passed to log_density
    n_shrink: int  # rejected proposals of the shrinkage, over all chains and moves
    acceptance: float  # fraction of slice moves that changed the point
    scale_acceptance: float  # fraction of scale moves accepted (NaN without scale pairs)
    mean_jump: float  # mean distance new points moved from their start, in cluster-whitened units
    n_clusters: int
    insertion_u: float  # Mann–Whitney U of the new points' log L against the survivors'
    insertion_u_var: float  # its variance if new points and survivors are exchangeable


class NestedState(NamedTuple):
    """Everything a run needs to continue: live points, running sums and the dead so far."""

    live: np.ndarray  # (n, d)
    log_likelihood: np.ndarray  # (n,)
    log_prior: np.ndarray  # (n,)
    log_likelihood_birth: np.ndarray  # (n,) threshold each live point was drawn above
    log_x: float  # expected log prior volume inside the latest threshold, −Σ_i 1/n_i
    log_z: float  # log evidence of the dead points (trapezoid rule on expected volumes)
    last_log_likelihood: float  # log L of the latest dead point (−inf before any)
    n_replaced: int
    n_evaluations: int
    clusters: Clusters | None  # None until the first step fits them
    seed: int  # seeds the volume simulation, drawn once so that results never advance the rng
    history: tuple  # NestedStepInfo of every step so far


class NestedRun(NamedTuple):
    """A finished (or stopped) run: evidence, posterior sample and per-step diagnostics."""

    log_z: float  # mean of log Z over the simulated volume sequences
    log_z_se: float  # their standard deviation: the statistical error (Higson et al. 2018)
    log_z_point: float  # log Z with the expected log-volumes
    log_z_draws: np.ndarray  # (S,) log Z of each simulated volume sequence
    information: float  # H = KL(posterior ‖ prior), nats
    log_z_se_classic: float  # √(H / n_live) (Skilling 2006)
    points: np.ndarray  # (N, d) dead points, then the final live points
    log_likelihood: np.ndarray  # (N,)
    log_prior: np.ndarray  # (N,)
    log_likelihood_birth: np.ndarray  # (N,)
    log_weights: np.ndarray  # (N,) normalised log posterior weights (expected volumes)
    ess: float  # Kish's effective sample size of the weights
    n_live: int
    stop_reason: str  # "termination", "max_steps" or "plateau"
    n_evaluations: int  # all density evaluations, the initial ones included
    # per step, one entry each (see NestedStepInfo)
    log_threshold: np.ndarray
    log_x: np.ndarray
    log_z_steps: np.ndarray
    log_z_live: np.ndarray
    max_log_likelihood: np.ndarray
    evaluations: np.ndarray
    shrink_steps: np.ndarray
    acceptance: np.ndarray
    scale_acceptance: np.ndarray
    mean_jump: np.ndarray
    n_clusters: np.ndarray
    insertion_z: float  # insertion-rank test, N(0, 1) for a sampler that draws correctly
    state: NestedState  # continues the run (pass it as ``live`` to :func:`nested_core`)


# --------------------------------------------------------------------------- public functions
def nested_core(
    rng: np.random.Generator,
    log_density: Callable,
    live,
    *,
    num_delete: int,
    num_inner_steps: int,
    termination: float,
    canonicalise: Callable | None = None,
    max_steps: int | None = None,
    n_volume_samples: int = 100,
    max_clusters: int = 8,
    scale_pairs: tuple = (),
    callback: Callable | None = None,
) -> NestedRun:
    r"""Nested slice sampling of the evidence Z = ∫ L(θ) π(θ) dθ on R^d.

    Every step kills the ``num_delete`` live points of lowest likelihood, the largest of their
    log L being the new threshold L*, and replaces them by ``num_delete`` survivors, picked
    uniformly, each moved by ``num_inner_steps`` hit-and-run slice moves on π restricted to
    L > L* (Yallup et al. 2026; BlackJAX ``blackjax.ns.nss``). A step deleting k of n points
    counts as k sequential deletions with n, n−1, …, n−k+1 live points: the i-th dead point's
    volume shrinks by E[log t_i] = −1/n_i (Skilling 2006). The run stops once the live points'
    share of the evidence is small,

    .. math::

        \log\bigl(X_{\rm now}\,\overline{L}_{\rm live}\bigr) - \log Z_{\rm dead}
        < \log(\texttt{termination}).

    Parameters
    ----------
    rng : numpy.random.Generator
        The only source of randomness: the same seed gives a bit-identical run.
    log_density : callable
        ``log_density(X) -> (log_prior, log_likelihood)`` for X of shape (m, d), each (m,).
        ``log_prior`` is the normalised prior density of the unconstrained space (Jacobians
        included); NaN counts as −inf.
    live : ndarray (n_live, d) or NestedState
        Initial live points, exact draws from the prior; or the ``state`` of an earlier run
        (:attr:`NestedRun.state`), which continues it: with the rng in the state it had after
        that run's last step the continued run is identical to an uninterrupted one.
    num_delete : int
        Points killed and replaced per step, in one vectorised batch; 1 ≤ num_delete < n_live.
    num_inner_steps : int
        Slice moves per replacement. BlackJAX recommends a multiple of d; see
        ``benchmarks/results/nested_core_defaults.md``.
    termination : float
        In (0, 1]: stop when the live points hold less than this fraction of the evidence
        found so far.
    canonicalise : callable, optional
        ``canonicalise(X, reference) -> X'`` maps points to their copy, under a symmetry of the
        model, nearest ``reference`` (d,) (it must leave ``log_density`` unchanged, which is
        checked on the initial live points, and give every copy of a point the same result,
        e.g. the copy nearest the reference). The reference is the live point of highest
        likelihood at each cluster fit; covariances and clusters are estimated on the
        canonical copies, chains start from them and their moves stay among canonical points
        (the fixed points of ``canonicalise``, one copy of each point).
    max_steps : int, optional
        Stop after this many steps in all (counting those of a continued run).
    n_volume_samples : int, default 100
        Simulated log-volume sequences for the error bar (:func:`nested_core_result`).
    max_clusters : int, default 8
        Most clusters of the live points (1: one global covariance, as in BlackJAX).
    scale_pairs : tuple of ScalePair, optional
        Non-centred scales and their blocks (:func:`pymc_evidence.scale_moves.find_scale_pairs`):
        each slice move is followed by one scale move per pair, Metropolis on the constrained
        prior in the chain's cell.
    callback : callable, optional
        ``callback(state, info)`` after each step, with the new :class:`NestedState` and the
        step's :class:`NestedStepInfo` (a progress bar; a checkpoint, which saves the state
        with ``rng``'s state to continue the run).

    Returns
    -------
    NestedRun

    Examples
    --------
    A 2-d Gaussian likelihood under a N(0, 3² I) prior, where Z = N(1; 0, 3² + 0.5²) per axis:

    >>> import numpy as np
    >>> from scipy.stats import norm
    >>> def log_density(x):
    ...     return (norm.logpdf(x, 0, 3).sum(axis=1), norm.logpdf(x, 1, 0.5).sum(axis=1))
    >>> rng = np.random.default_rng(0)
    >>> run = nested_core(rng, log_density, rng.normal(0, 3, size=(100, 2)),
    ...                   num_delete=10, num_inner_steps=4, termination=1e-3)
    >>> round(run.log_z, 2), round(run.log_z_se, 2)
    (-4.02, 0.19)
    >>> round(float(2 * norm.logpdf(1, 0, np.hypot(3, 0.5))), 2)   # exact
    -4.17
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {rng!r:.60}")
    _check_callable("log_density", log_density)
    _check_callable("canonicalise", canonicalise, optional=True)
    _check_callable("callback", callback, optional=True)
    n_live = live.live.shape[0] if isinstance(live, NestedState) else _live_shape(live)[0]
    _check_step_settings(num_delete, num_inner_steps, max_clusters, n_live)
    termination = _fraction("termination", termination)
    max_steps = _integer("max_steps", max_steps, 0, optional=True)
    n_volume_samples = _integer("n_volume_samples", n_volume_samples, 2)

    state = live if isinstance(live, NestedState) else nested_core_init(
        rng, log_density, live, canonicalise=canonicalise)
    log_termination = np.log(termination)
    while True:
        reason = _stop_reason(state, num_delete, log_termination, max_steps)
        if reason:
            break
        state, info = nested_core_step(
            rng, state, log_density, num_delete=num_delete, num_inner_steps=num_inner_steps,
            canonicalise=canonicalise, max_clusters=max_clusters, scale_pairs=scale_pairs)
        if callback is not None:
            callback(state, info)
    return nested_core_result(state, n_volume_samples=n_volume_samples, stop_reason=reason)


def nested_core_init(
    rng: np.random.Generator,
    log_density: Callable,
    live: np.ndarray,
    *,
    canonicalise: Callable | None = None,
) -> NestedState:
    """The state before the first step: the live points' densities, X = 1 and Z = 0.

    Raises ``ValueError`` when a live point has a non-finite log prior or log likelihood (they
    must be prior draws), when ``log_density`` returns arrays of the wrong shape, or when
    ``canonicalise`` changes the density.
    """
    n = _live_shape(live)[0]
    live = np.array(live, dtype=float)
    log_prior, log_likelihood = _evaluate(log_density, live)
    for name, values in (("log prior", log_prior), ("log likelihood", log_likelihood)):
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            raise ValueError(f"live points must be prior draws with a finite {name}; points "
                             f"{bad[:5].tolist()} have {values[bad[:5]].tolist()}")
    n_evaluations = n
    if canonicalise is not None:
        canonical = _canonical(canonicalise, live, live[np.argmax(log_likelihood)])
        log_prior_c, log_likelihood_c = _evaluate(log_density, canonical)
        n_evaluations += n
        if not (np.allclose(log_prior_c, log_prior, rtol=1e-6, atol=1e-8)
                and np.allclose(log_likelihood_c, log_likelihood, rtol=1e-6, atol=1e-8)):
            raise ValueError("canonicalise must leave log_density unchanged (map a point to "
                             "another copy of the same symmetry), but it changes it at the "
                             "initial live points")
    return NestedState(
        live=live, log_likelihood=log_likelihood, log_prior=log_prior,
        log_likelihood_birth=np.full(n, -np.inf), log_x=0.0, log_z=-np.inf,
        last_log_likelihood=-np.inf, n_replaced=0, n_evaluations=n_evaluations, clusters=None,
        seed=int(rng.integers(2**63)), history=(),
    )


def nested_core_step(
    rng: np.random.Generator,
    state: NestedState,
    log_density: Callable,
    *,
    num_delete: int,
    num_inner_steps: int,
    canonicalise: Callable | None = None,
    max_clusters: int = 8,
    scale_pairs: tuple = (),
) -> tuple[NestedState, NestedStepInfo]:
    r"""One step: kill ``num_delete`` points (and any tied with the last of them, a plateau),
    replace them by slice-sampled survivors.

    The k dead points, in ascending log L, shrink the expected log-volume by 1/n_i each with
    n_i = n, n−1, …, n−k+1, and add to the evidence by the trapezoid rule,

    .. math::

        Z \mathrel{+}= \sum_i \tfrac12 (L_{i-1} + L_i)(X_{i-1} - X_i),
        \qquad X_i = X_{i-1} e^{-1/n_i},

    with L_0 = 0 at X = 1. The clusters are refitted (on the canonical copies of all live
    points) once a tenth of the live points has been replaced since the last fit. With
    ``scale_pairs`` each slice move is followed by one scale move per pair. The input state is
    not modified.

    Returns
    -------
    (NestedState, NestedStepInfo)
        The new state (its ``history`` ends with the info) and the step's diagnostics.
    """
    n = state.live.shape[0]
    _check_step_settings(num_delete, num_inner_steps, max_clusters, n)
    order = np.argsort(state.log_likelihood, kind="stable")
    threshold = float(state.log_likelihood[order[num_delete - 1]])
    # Every point tied at the threshold dies with the batch (a likelihood plateau, e.g. from
    # pt.clip): the replacements come from {L > L*}, and survivors left at L* would make the
    # live set non-uniform there. Counting them as dying one by one, n_i = n, n-1, ..., is
    # Fowlie, Handley & Su (2021)'s treatment of plateaus.
    k = max(num_delete, int(np.sum(state.log_likelihood <= threshold)))
    dead = order[:k]
    survivors = np.flatnonzero(state.log_likelihood > threshold)
    if survivors.size == 0:
        raise ValueError(f"no live point has log L above the threshold {threshold}: the "
                         "likelihood is flat over the live points (a plateau)")

    clusters = state.clusters
    if clusters is None or state.n_replaced - clusters.adapted_at >= _ADAPT_FRACTION * n:
        reference = state.live[order[-1]] if canonicalise is not None else None
        clusters = _fit_clusters(_canonical(canonicalise, state.live, reference), max_clusters,
                                 state.n_replaced, reference)
    start = survivors[rng.integers(survivors.size, size=k)]
    x0 = _canonical(canonicalise, state.live[start], clusters.reference)
    labels = _assign(clusters, x0)
    x, log_prior, log_likelihood = x0, state.log_prior[start], state.log_likelihood[start]
    n_evaluations = n_shrink = n_moved = n_scale_accepted = 0
    widths = initial_widths(scale_pairs)
    for _ in range(num_inner_steps):
        x_new, log_prior, log_likelihood, evals, shrinks = _slice_move(
            rng, x, log_prior, log_likelihood, threshold, clusters, labels, log_density,
            canonicalise)
        n_moved += int(np.any(x_new != x, axis=1).sum())
        n_evaluations += evals
        n_shrink += shrinks
        for pair, width in zip(scale_pairs, widths):
            x_new, log_prior, log_likelihood, evals, accepted = _scale_move(
                rng, x_new, log_prior, log_likelihood, threshold, clusters, labels,
                log_density, canonicalise, pair, width)
            n_evaluations += evals
            n_scale_accepted += accepted
        x = x_new

    live = state.live.copy()
    live[dead] = x
    new_log_likelihood = state.log_likelihood.copy()
    new_log_likelihood[dead] = log_likelihood
    new_log_prior = state.log_prior.copy()
    new_log_prior[dead] = log_prior
    birth = state.log_likelihood_birth.copy()
    birth[dead] = threshold

    dead_log_likelihood = state.log_likelihood[dead]
    log_x = state.log_x - np.cumsum(1.0 / (n - np.arange(k)))
    log_z = np.logaddexp(state.log_z, logsumexp(_log_trapezoid(
        np.r_[state.last_log_likelihood, dead_log_likelihood], np.r_[state.log_x, log_x])))
    info = NestedStepInfo(
        dead=state.live[dead], dead_log_likelihood=dead_log_likelihood,
        dead_log_prior=state.log_prior[dead],
        dead_log_likelihood_birth=state.log_likelihood_birth[dead],
        log_threshold=threshold, log_x=float(log_x[-1]), log_z=float(log_z),
        log_z_live=float(log_x[-1] + logsumexp(new_log_likelihood) - np.log(n)),
        max_log_likelihood=float(new_log_likelihood.max()), n_evaluations=n_evaluations,
        n_shrink=n_shrink, acceptance=n_moved / (k * num_inner_steps),
        scale_acceptance=(n_scale_accepted / (k * num_inner_steps * len(scale_pairs))
                          if scale_pairs else np.nan),
        mean_jump=float(np.mean(_whitened_norm(clusters, labels, x - x0))),
        n_clusters=len(clusters.mean),
        **_insertion_rank(state.log_likelihood[order[k:]], log_likelihood),
    )
    new_state = NestedState(
        live=live, log_likelihood=new_log_likelihood, log_prior=new_log_prior,
        log_likelihood_birth=birth, log_x=info.log_x, log_z=info.log_z,
        last_log_likelihood=float(dead_log_likelihood[-1]), n_replaced=state.n_replaced + k,
        n_evaluations=state.n_evaluations + n_evaluations, clusters=clusters, seed=state.seed,
        history=state.history + (info,),
    )
    return new_state, info


def nested_core_result(state: NestedState, *, n_volume_samples: int = 100,
                       stop_reason: str = "termination") -> NestedRun:
    r"""The evidence, its error, the weighted posterior sample and diagnostics of a state.

    Dead point i (in ascending L) gets the trapezoid weight w_i = L_i (X_{i−1} − X_{i+1}) / 2
    (X_0 = 1, X_{N+1} := X_N); the n final live points get X_N / n each, the Monte Carlo
    estimate of the evidence inside the last contour. With the expected volumes
    log X_i = −Σ_{j≤i} 1/n_j this gives ``log_z_point``, the posterior weights and the
    information H = Σ_i p_i log L_i − log Z, whence Skilling's error √(H/n). The statistical
    error simulates the volumes instead, log t_i = log(U_i) / n_i with U_i ~ U(0, 1) (i.e.
    t_i ~ Beta(n_i, 1)), S times (Higson et al. 2018): ``log_z`` and ``log_z_se`` are the
    mean and standard deviation of the S values of log Z. The simulation is seeded by
    ``state.seed``, so the result is a function of the state alone.
    """
    n_volume_samples = _integer("n_volume_samples", n_volume_samples, 2)
    history = state.history
    n = state.live.shape[0]
    points = np.concatenate([h.dead for h in history] + [state.live])
    log_likelihood = np.concatenate([h.dead_log_likelihood for h in history]
                                    + [state.log_likelihood])
    n_dead = log_likelihood.size - n
    n_alive = np.concatenate([np.zeros(0)] + [n - np.arange(h.dead.shape[0]) for h in history])

    expected = -np.cumsum(1.0 / n_alive)
    log_w = _log_weights(log_likelihood, n_dead, expected, n)
    log_z_point = float(logsumexp(log_w))
    log_weights = log_w - log_z_point
    posterior = np.exp(log_weights)
    information = float(np.sum(posterior * log_likelihood) - log_z_point)

    # One sequence at a time: S × N arrays would not fit for long runs.
    sim_rng = np.random.default_rng(state.seed)
    log_z_draws = np.array([logsumexp(_log_weights(
        log_likelihood, n_dead, np.cumsum(np.log1p(-sim_rng.random(n_dead)) / n_alive), n))
        for _ in range(n_volume_samples)])
    steps = {field: np.array([getattr(h, field) for h in history]) for field in (
        "log_threshold", "log_x", "log_z", "log_z_live", "max_log_likelihood", "n_evaluations",
        "n_shrink", "acceptance", "scale_acceptance", "mean_jump", "n_clusters", "insertion_u",
        "insertion_u_var")}
    return NestedRun(
        log_z=float(np.mean(log_z_draws)), log_z_se=float(np.std(log_z_draws, ddof=1)),
        log_z_point=log_z_point, log_z_draws=log_z_draws, information=information,
        log_z_se_classic=float(np.sqrt(max(information, 0.0) / n)), points=points,
        log_likelihood=log_likelihood,
        log_prior=np.concatenate([h.dead_log_prior for h in history] + [state.log_prior]),
        log_likelihood_birth=np.concatenate([h.dead_log_likelihood_birth for h in history]
                                            + [state.log_likelihood_birth]),
        log_weights=log_weights, ess=kish_ess(log_weights), n_live=n, stop_reason=stop_reason,
        n_evaluations=state.n_evaluations, log_threshold=steps["log_threshold"],
        log_x=steps["log_x"], log_z_steps=steps["log_z"], log_z_live=steps["log_z_live"],
        max_log_likelihood=steps["max_log_likelihood"], evaluations=steps["n_evaluations"],
        shrink_steps=steps["n_shrink"], acceptance=steps["acceptance"],
        scale_acceptance=steps["scale_acceptance"],
        mean_jump=steps["mean_jump"], n_clusters=steps["n_clusters"],
        insertion_z=_insertion_z(steps["insertion_u"], steps["insertion_u_var"]), state=state,
    )


def equal_weight_draws(rng: np.random.Generator, run: NestedRun, n: int) -> np.ndarray:
    """``n`` equally weighted posterior draws (n, d): systematic resampling of the run's points.

    Systematic resampling (one uniform offset, n evenly spaced positions on the cumulative
    weights) keeps every point's count within one of n·p_i; the draws are returned shuffled.
    """
    n = _integer("n", n, 1)
    cumulative = np.cumsum(np.exp(run.log_weights))
    positions = (rng.random() + np.arange(n)) / n * cumulative[-1]
    index = np.minimum(np.searchsorted(cumulative, positions, side="right"), cumulative.size - 1)
    return run.points[rng.permutation(index)]


def kish_ess(log_weights: np.ndarray) -> float:
    """Kish's effective sample size (Σ w)² / Σ w² of (unnormalised) log weights."""
    return float(np.exp(2 * logsumexp(log_weights) - logsumexp(2 * log_weights)))


# --------------------------------------------------------------------------- insertion ranks
def _insertion_rank(survivors: np.ndarray, new: np.ndarray) -> dict:
    r"""Mann–Whitney U of the new points' log L against the m survivors' (ties count ½).

    A correct step leaves the n = m + k live points i.i.d. from the constrained prior, so new
    points and survivors are exchangeable and U has mean km/2 and variance km(n+1)/12; each
    new point's insertion rank among the survivors is uniform (Fowlie, Handley and Su 2020,
    who test the ranks of single insertions; summing them per step keeps the null exact when
    the k ranks of a batch share the same survivors).
    """
    m, k = survivors.size, new.size
    sorted_survivors = np.sort(survivors)
    below = np.searchsorted(sorted_survivors, new, side="left")
    at_or_below = np.searchsorted(sorted_survivors, new, side="right")
    u = float(np.sum(below + at_or_below) / 2 - k * m / 2)
    return {"insertion_u": u, "insertion_u_var": k * m * (m + k + 1) / 12}


def _insertion_z(u: np.ndarray, variance: np.ndarray) -> float:
    """The run's insertion-rank statistic Σ U / √Σ Var: independent steps, N(0, 1) under a
    correct sampler; positive when new points land too high in likelihood (chains that do not
    reach the contour), negative when too low."""
    total = float(np.sum(variance))
    return float(np.sum(u) / np.sqrt(total)) if total > 0 else 0.0


# --------------------------------------------------------------------------- evidence helpers
def _log_trapezoid(log_likelihood: np.ndarray, log_x: np.ndarray) -> np.ndarray:
    """log of ½(L_{i−1} + L_i)(X_{i−1} − X_i) for i = 1…, from arrays starting at i = 0."""
    return (np.logaddexp(log_likelihood[:-1], log_likelihood[1:]) - np.log(2)
            + log_x[:-1] + _log1mexp(log_x[1:] - log_x[:-1]))


def _log_weights(log_likelihood: np.ndarray, n_dead: int, log_x: np.ndarray,
                 n_live: int) -> np.ndarray:
    """log w of the dead points (trapezoid: L_i (X_{i−1} − X_{i+1}) / 2) and the live ones
    (L_j X_N / n); ``log_x`` (n_dead,) are the dead points' log-volumes."""
    previous = np.r_[0.0, log_x[:-1]]
    following = np.r_[log_x[1:], log_x[-1:]]
    dead = log_likelihood[:n_dead] + previous + _log1mexp(following - previous) - np.log(2)
    final = log_x[-1] if n_dead else 0.0
    return np.r_[dead, log_likelihood[n_dead:] + final - np.log(n_live)]


def _log1mexp(a: np.ndarray) -> np.ndarray:
    """log(1 − e^a) for a ≤ 0, accurate on both sides of −log 2 (Mächler 2012)."""
    a = np.asarray(a, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(a > -np.log(2), np.log(-np.expm1(a)), np.log1p(-np.exp(a)))


def _stop_reason(state: NestedState, num_delete: int, log_termination: float,
                 max_steps: int | None) -> str:
    """Why the run stops before its next step, or "" when it goes on."""
    log_z_live = state.log_x + logsumexp(state.log_likelihood) - np.log(state.live.shape[0])
    if log_z_live - state.log_z < log_termination:
        return "termination"
    if max_steps is not None and len(state.history) >= max_steps:
        return "max_steps"
    highest_dead = np.partition(state.log_likelihood, num_delete - 1)[num_delete - 1]
    if highest_dead >= state.log_likelihood.max():  # no survivor would be above the threshold
        return "plateau"
    return ""


# ------------------------------------------------------------------------------ slice moves
def _slice_move(rng, x, log_prior, log_likelihood, threshold, clusters, labels, log_density,
                canonicalise):
    """One hit-and-run slice move (Neal 2003, §4: stepping out and shrinkage) of every chain
    on π restricted to {L > L*} ∩ its cell, vectorised: finished chains wait.

    The slice is {θ : π(θ) ≥ u π(x), L(θ) > L*, θ in the chain's cell}, u ~ U(0, 1]. The line
    is x + t·e with e = C_c v, v uniform on the unit sphere and C_c the Cholesky factor of the
    chain's cluster (BlackJAX's Mahalanobis-normalised N(0, Σ_c) direction), and the initial
    interval has length 1 in t. Returns the new points, their densities, the evaluations and
    the shrinkage rejections.
    """
    m, d = x.shape
    v = rng.standard_normal((m, d))
    direction = np.einsum("mij,mj->mi", clusters.cholesky[labels],
                          v / np.linalg.norm(v, axis=1, keepdims=True))
    log_height = log_prior + np.log1p(-rng.random(m))

    def inside(rows, t):
        points = x[rows] + t[:, None] * direction[rows]
        ok, lp, ll, evals = _in_slice(points, labels[rows], log_height[rows], threshold,
                                      clusters, log_density, canonicalise)
        return points, ok, lp, ll, evals

    # Stepping out: the grid offset and the split of the m steps between the ends are random,
    # which makes the interval equally likely from any point of the slice it covers.
    lower = -rng.random(m)
    upper = lower + 1.0
    budget_lower = np.floor(_MAX_STEP_OUT * rng.random(m)).astype(int)
    budget_upper = _MAX_STEP_OUT - 1 - budget_lower
    grow_lower, grow_upper = budget_lower > 0, budget_upper > 0
    n_evaluations = 0
    while grow_lower.any() or grow_upper.any():
        rows_lower, rows_upper = np.flatnonzero(grow_lower), np.flatnonzero(grow_upper)
        _, ok, _, _, evals = inside(np.r_[rows_lower, rows_upper],
                                    np.r_[lower[rows_lower], upper[rows_upper]])
        n_evaluations += evals
        # Ends still inside the slice step out by one length, while their budget lasts.
        inside_lower = rows_lower[ok[:rows_lower.size]]
        inside_upper = rows_upper[ok[rows_lower.size:]]
        lower[inside_lower] -= 1.0
        upper[inside_upper] += 1.0
        budget_lower[inside_lower] -= 1
        budget_upper[inside_upper] -= 1
        grow_lower[:] = False
        grow_upper[:] = False
        grow_lower[inside_lower] = budget_lower[inside_lower] > 0
        grow_upper[inside_upper] = budget_upper[inside_upper] > 0

    # Shrinkage: draw uniformly on the interval, cut it at rejected draws towards t = 0 (x).
    x_new, log_prior_new, log_likelihood_new = x.copy(), log_prior.copy(), log_likelihood.copy()
    pending = np.arange(m)
    n_shrink = 0
    while pending.size:
        t = lower[pending] + rng.random(pending.size) * (upper[pending] - lower[pending])
        points, ok, lp, ll, evals = inside(pending, t)
        n_evaluations += evals
        accepted = pending[ok]
        x_new[accepted], log_prior_new[accepted], log_likelihood_new[accepted] = (
            points[ok], lp[ok], ll[ok])
        rejected, t_rejected = pending[~ok], t[~ok]
        below = t_rejected < 0
        lower[rejected[below]] = t_rejected[below]
        upper[rejected[~below]] = t_rejected[~below]
        n_shrink += rejected.size
        pending = rejected
    return x_new, log_prior_new, log_likelihood_new, n_evaluations, n_shrink


def _scale_move(rng, x, log_prior, log_likelihood, threshold, clusters, labels, log_density,
                canonicalise, pair, width):
    """One scale move (:func:`pymc_evidence.scale_moves.propose`) of every chain, Metropolis
    on π restricted to {L > L*} ∩ its cell. The move keeps L up to rounding; the threshold is
    checked all the same. Returns the new points, their densities, the evaluations and the
    number of moves accepted."""
    proposal, log_jacobian = propose(rng, x, pair, width)
    ok, lp, ll, evals = _in_slice(proposal, labels, np.full(len(x), -np.inf), threshold,
                                  clusters, log_density, canonicalise)
    with np.errstate(invalid="ignore"):
        log_ratio = lp - log_prior + log_jacobian
    accepted = ok & (np.log(rng.random(len(x))) < np.where(np.isfinite(log_ratio), log_ratio,
                                                           -np.inf))
    keep = accepted[:, None]
    return (np.where(keep, proposal, x), np.where(accepted, lp, log_prior),
            np.where(accepted, ll, log_likelihood), evals, int(accepted.sum()))


def _in_slice(points, labels, log_height, threshold, clusters, log_density, canonicalise):
    """Which points lie in their chain's slice, their densities (−inf where not evaluated) and
    the number evaluated; points outside their cell, or (with ``canonicalise``) not their own
    canonical copy, are rejected without evaluating them."""
    in_cell = np.ones(len(points), dtype=bool)
    if canonicalise is not None or len(clusters.mean) > 1:
        canonical = _canonical(canonicalise, points, clusters.reference)
        # Chains start from canonical copies and must stay among them: directions from the
        # canonical points do not keep the constrained prior's law over the copies when a move
        # crosses into another (symmetry.is_nearest_copy). A cell is a set of canonical
        # copies, so every copy of a point is in the same cell.
        in_cell = np.all(canonical == points, axis=1)
        if len(clusters.mean) > 1:
            in_cell &= _assign(clusters, canonical) == labels
    log_prior = np.full(len(points), -np.inf)
    log_likelihood = np.full(len(points), -np.inf)
    if in_cell.any():
        log_prior[in_cell], log_likelihood[in_cell] = _evaluate(log_density, points[in_cell])
    ok = in_cell & (log_likelihood > threshold) & (log_prior >= log_height)
    return ok, log_prior, log_likelihood, int(in_cell.sum())


# --------------------------------------------------------------------------------- clusters
def _fit_clusters(points: np.ndarray, max_clusters: int, adapted_at: int,
                  reference: np.ndarray | None = None) -> Clusters:
    """Split the live points recursively in two (:func:`_two_means`) while a split is accepted
    and fewer than ``max_clusters`` exist; fit a Gaussian (mean, covariance) to each."""
    n = points.shape[0]
    final, queue = [], [np.arange(n)]
    while queue and len(final) + len(queue) < max_clusters:
        members = queue.pop(0)
        halves = _two_means(points[members])
        if halves is None:
            final.append(members)
        else:
            queue.extend([members[halves], members[~halves]])
    groups = sorted(final + queue, key=lambda g: g[0])
    means = np.array([points[g].mean(axis=0) for g in groups])
    cholesky = np.array([_cholesky(points[g]) for g in groups])
    log_det = np.log(np.diagonal(cholesky, axis1=1, axis2=2)).sum(axis=1)
    log_weight = np.log([g.size / n for g in groups]) - log_det
    return Clusters(means, cholesky, log_weight, adapted_at, reference)


def _two_means(points: np.ndarray) -> np.ndarray | None:
    """A 2-means split (boolean mask of one half) if it separates two clusters, else None.

    Lloyd's algorithm from the split at the mean along the first principal axis (deterministic,
    and the axis along which separated modes lie). Accepted when both halves have at least
    d + 2 points (a full-rank covariance) and their means are more than ``_SPLIT_SEPARATION``
    apart in the Mahalanobis metric of the pooled within-half covariance W:
    √((μ_1 − μ_2)ᵀ W⁻¹ (μ_1 − μ_2)) — affine invariant, ≈ 2.7–4.5 for one convex or ring-shaped
    set of points, the distance in within-mode standard deviations for separated modes.
    """
    n, d = points.shape
    if n < 2 * (d + 2):
        return None
    centred = points - points.mean(axis=0)
    axis = np.linalg.svd(centred, full_matrices=False)[2][0]
    half = centred @ axis > 0
    for _ in range(50):
        if half.all() or not half.any():
            return None
        mean_1, mean_2 = points[half].mean(axis=0), points[~half].mean(axis=0)
        new = (((points - mean_1) ** 2).sum(axis=1) < ((points - mean_2) ** 2).sum(axis=1))
        if np.array_equal(new, half):
            break
        half = new
    sizes = np.array([half.sum(), (~half).sum()])
    if sizes.min() < d + 2:
        return None
    mean_1, mean_2 = points[half].mean(axis=0), points[~half].mean(axis=0)
    scatter = sum(np.atleast_2d(np.cov(points[h], rowvar=False)) * (s - 1)
                  for h, s in ((half, sizes[0]), (~half, sizes[1])))
    difference = mean_1 - mean_2
    separation = np.sqrt(difference @ np.linalg.solve(scatter / (n - 2), difference))
    return half if separation > _SPLIT_SEPARATION else None


def _cholesky(points: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of the points' covariance, with a small relative ridge."""
    cov = np.atleast_2d(np.cov(points, rowvar=False))
    scale = np.mean(np.diag(cov))
    return np.linalg.cholesky(cov + _RIDGE * scale * np.eye(len(cov)))


def _assign(clusters: Clusters, points: np.ndarray) -> np.ndarray:
    """Each point's cell: the cluster of highest Gaussian log density plus log size share."""
    if len(clusters.mean) == 1:
        return np.zeros(len(points), dtype=int)
    scores = np.empty((len(points), len(clusters.mean)))
    for c, (mean, chol) in enumerate(zip(clusters.mean, clusters.cholesky)):
        whitened = solve_triangular(chol, (points - mean).T, lower=True)
        scores[:, c] = clusters.log_weight[c] - 0.5 * np.sum(whitened**2, axis=0)
    return np.argmax(scores, axis=1)


def _whitened_norm(clusters: Clusters, labels: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """‖C_c⁻¹ v‖ of each vector under its cluster's Cholesky factor C_c."""
    norms = np.empty(len(vectors))
    for c, chol in enumerate(clusters.cholesky):
        rows = labels == c
        norms[rows] = np.linalg.norm(solve_triangular(chol, vectors[rows].T, lower=True), axis=0)
    return norms


# --------------------------------------------------------------------------- plumbing
def _evaluate(log_density: Callable, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log prior, log likelihood) of the points as float arrays of shape (m,), NaN → −inf."""
    log_prior, log_likelihood = log_density(points)
    out = []
    for name, values in (("log_prior", log_prior), ("log_likelihood", log_likelihood)):
        values = np.asarray(values, dtype=float)
        if values.shape != (len(points),):
            raise ValueError(f"log_density must return {name} of shape ({len(points)},) for "
                             f"{len(points)} points, got shape {values.shape}")
        out.append(np.where(np.isnan(values), -np.inf, values))
    return out[0], out[1]


def _canonical(canonicalise: Callable | None, points: np.ndarray,
               reference: np.ndarray | None) -> np.ndarray:
    """The points' copies nearest ``reference`` (the points themselves without
    ``canonicalise``)."""
    if canonicalise is None:
        return points
    canonical = np.asarray(canonicalise(points, reference), dtype=float)
    if canonical.shape != points.shape:
        raise ValueError(f"canonicalise must return an array of the shape it is given, "
                         f"{points.shape}, got {canonical.shape}")
    return canonical


def _live_shape(live) -> tuple[int, int]:
    """(n_live, d) of initial live points; ValueError unless a finite 2-d array with n > d."""
    if not isinstance(live, np.ndarray):
        raise TypeError(f"live must be a numpy array (n_live, d) or a NestedState, got "
                        f"{type(live).__name__}")
    if live.ndim != 2 or live.shape[0] < 2 or live.shape[1] < 1:
        raise ValueError(f"live must be a 2-d array (n_live, d) with n_live >= 2, got shape "
                         f"{live.shape}")
    if not np.all(np.isfinite(live)):
        raise ValueError("live points must be finite")
    n, d = live.shape
    if n <= d:
        raise ValueError(f"live must have more points than dimensions, so that their "
                         f"covariance is full rank: got {n} points in {d} dimensions")
    return n, d


def _check_step_settings(num_delete, num_inner_steps, max_clusters, n_live: int) -> None:
    _integer("num_delete", num_delete, 1)
    if num_delete >= n_live:
        raise ValueError(f"num_delete must be < n_live = {n_live} (survivors start the new "
                         f"points), got {num_delete}")
    _integer("num_inner_steps", num_inner_steps, 1)
    _integer("max_clusters", max_clusters, 1)


def _check_callable(name: str, value, *, optional: bool = False) -> None:
    if not (callable(value) or (optional and value is None)):
        kind = "callable or None" if optional else "callable"
        raise TypeError(f"{name} must be {kind}, got {value!r:.60}")


def _integer(name: str, value, minimum: int, *, optional: bool = False) -> int | None:
    """``value`` as an int >= ``minimum`` (the wording of :mod:`pymc_evidence._validation`,
    which imports PyMC, kept out of this core)."""
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer{' or None' if optional else ''}, "
                        f"got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _fraction(name: str, value) -> float:
    """``value`` as a float in (0, 1]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    return float(value)
