"""Contour Monte Carlo's PyMC-free core: Liang's (2005, §2.1) stochastic approximation.

The sample space is partitioned into m regions E_1, …, E_m. A sampler targets ψ(x) / ĝ(E_i)
on E_i, and after every iteration the weight ĝ of the region visited is multiplied by
(1 + δ_s); at convergence every region is visited equally often and ĝ(E_i) ∝ ∫_{E_i} ψ, so
ratios of ĝ are ratios of the regions' masses (Liang 2005, Theorem 1). Stage s lasts K_s
iterations, after which δ shrinks (:func:`delta_schedule`); Liang's statistic S_k
(:func:`stability_statistic`) tells whether the visiting frequencies have settled.

:func:`cmc_core` runs the algorithm for *any* sampler on *any* partition (it is tested on
Liang's 10-state example, Tables 1–2), for R independent replicas at once (arrays with a
leading replica axis), whose spread gives the standard error. :func:`~pymc_evidence.cmc`
supplies the sampler over a list of PyMC models, one region per model.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
from scipy.special import logsumexp

__all__ = ["cmc_core", "delta_schedule", "stability_statistic", "CMCCoreResult"]


def delta_schedule(delta_1: float = 0.1, delta_end: float = 1e-6) -> np.ndarray:
    """Modification factors δ_1 > δ_2 > … of the stages: δ_{s+1} = √(1 + δ_s) − 1 while δ ≥ δ_end.

    (Liang 2005, §2.1.) For small δ this halves δ at every stage.
    """
    if not delta_1 > 0:
        raise ValueError(f"delta_1 must be positive, got {delta_1!r}")
    if not 0 < delta_end <= delta_1:
        raise ValueError(f"delta_end must be in (0, delta_1={delta_1}], got {delta_end!r}")
    deltas = [float(delta_1)]
    while True:
        nxt = np.sqrt(1.0 + deltas[-1]) - 1.0
        if nxt < delta_end:
            break
        deltas.append(float(nxt))
    return np.array(deltas)


def stability_statistic(counts_before: np.ndarray, counts_now: np.ndarray) -> np.ndarray:
    """Liang's S_k = (1/m) Σ_i |Rf_{i,(k+1)b} / Rf_{i,kb} − 1| per replica, with 0/0 := 1.

    Parameters
    ----------
    counts_before, counts_now : ndarray (R, m)
        Visit counts of each region within the stage at iterations kb and (k+1)b.

    Returns
    -------
    ndarray (R,)
        ``inf`` where a region visited now was unvisited before (its frequency is not stable).
    """
    before = counts_before / np.maximum(counts_before.sum(axis=1, keepdims=True), 1)
    now = counts_now / np.maximum(counts_now.sum(axis=1, keepdims=True), 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(before > 0, now / np.where(before > 0, before, 1.0), np.where(now > 0, np.inf, 1.0))
    return np.mean(np.abs(ratio - 1.0), axis=1)


class CMCCoreResult(NamedTuple):
    """What :func:`cmc_core` returns (arrays over R replicas and m regions)."""

    log_g: np.ndarray  # (R, m) final log ĝ, normalised so that Σ_i ĝ_i = 1 per replica
    log_g_stages: np.ndarray  # (S, R, m) normalised log ĝ at the end of each stage
    deltas: np.ndarray  # (S,) δ_s
    stage_iterations: np.ndarray  # (S,) iterations performed in each stage
    stability: np.ndarray  # (S,) max over replicas of S_k at the end of each stage
    counts: np.ndarray  # (S, R, m) visits per region in each stage
    path: np.ndarray  # (P, R) region of every replica at recorded iterations
    path_iteration: np.ndarray  # (P,) global iteration of each record
    path_stage: np.ndarray  # (P,) stage of each record
    state: object  # the sampler's final state


def cmc_core(
    rng: np.random.Generator,
    step: Callable,
    state,
    n_regions: int,
    n_replicas: int,
    *,
    delta_1: float = 0.1,
    delta_end: float = 1e-6,
    stage_length: int = 1000,
    growth: float = 1.5,
    batch_size: int | None = None,
    stability_tol: float | None = None,
    max_stage_factor: float = 2.0,
    log_g0: np.ndarray | None = None,
    path_every: int = 100,
    callback: Callable | None = None,
) -> CMCCoreResult:
    r"""Liang's contour Monte Carlo stochastic approximation (§2.1) for any sampler.

    The sampler targets, for the current weights,

    .. math::

        \pi(x) \propto \sum_{i=1}^m \frac{\psi(x)}{\hat g(E_i)}\, I(x \in E_i)
        \qquad \text{(Liang 2005, eq. 2.1)}

    and after every iteration the weight of the region visited is multiplied by (1 + δ_s).

    Parameters
    ----------
    rng : numpy.random.Generator
    step : callable
        ``step(rng, state, log_g) -> (state, region)``: one Metropolis–Hastings move of every
        replica targeting eq. 2.1 with the current ``log_g`` (R, m), i.e. accepting with
        probability min{1, [ĝ(E_{I(x)}) ψ(x*) T(x*→x)] / [ĝ(E_{I(x*)}) ψ(x) T(x→x*)]}
        (eq. 2.2; the paper's print has the ĝ ratio inverted, its text after eq. 2.4 has it
        right). ``region`` (R,) is each replica's region after the move.
    state : object
        The sampler's initial state, passed through to ``step``.
    n_regions : int
        m, the number of regions (models).
    n_replicas : int
        R independent replicas, each with its own ĝ; their spread is the standard error.
    delta_1, delta_end : float, default 0.1 and 1e-6
        First modification factor; stop once δ_s < ``delta_end`` (see :func:`delta_schedule`).
    stage_length : int, default 1000
        K_1, iterations of the first stage.
    growth : float, default 1.5
        K_{s+1} = growth · K_s.
    batch_size : int, optional
        b of the stability statistic S_k; default K_s / 10.
    stability_tol : float, optional
        When given, a stage continues past K_s (in batches of b, at most ``max_stage_factor``·K_s
        iterations in all) until S_k < ``stability_tol`` for every replica.
    log_g0 : ndarray (m,) or (R, m), optional
        Initial log ĝ (default 0: ĝ^{(0,0)} = 1).
    path_every : int, default 100
        Record every replica's region every this many iterations (Liang's Fig. 1 and 3).
    callback : callable, optional
        ``callback(stage, delta, log_g)`` after each stage (progress bars).

    Returns
    -------
    CMCCoreResult
    """
    if int(n_regions) != n_regions or n_regions < 1:
        raise ValueError(f"n_regions must be a positive integer, got {n_regions!r}")
    if int(n_replicas) != n_replicas or n_replicas < 1:
        raise ValueError(f"n_replicas must be a positive integer, got {n_replicas!r}")
    if int(stage_length) != stage_length or stage_length < 1:
        raise ValueError(f"stage_length must be a positive integer, got {stage_length!r}")
    if not growth >= 1:
        raise ValueError(f"growth must be at least 1, got {growth!r}")
    if int(path_every) != path_every or path_every < 1:
        raise ValueError(f"path_every must be a positive integer, got {path_every!r}")
    deltas = delta_schedule(delta_1, delta_end)
    R, m = int(n_replicas), int(n_regions)
    log_g = np.zeros((R, m))
    if log_g0 is not None:
        log_g = log_g + np.broadcast_to(np.asarray(log_g0, dtype=float), (R, m))
    rows = np.arange(R)

    log_g_stages, lengths, stabilities, stage_counts = [], [], [], []
    path, path_iteration, path_stage = [], [], []
    total = 0
    for s, delta in enumerate(deltas):
        K = int(round(stage_length * growth**s))
        b = int(batch_size) if batch_size else max(K // 10, 1)
        increment = np.log1p(delta)
        counts = np.zeros((R, m))
        snapshot = counts.copy()
        it, stability = 0, np.inf
        limit = K if stability_tol is None else int(np.ceil(max_stage_factor * K))
        while True:
            for _ in range(b):
                state, region = step(rng, state, log_g)
                log_g[rows, region] += increment
                counts[rows, region] += 1
                total += 1
                if total % path_every == 0:
                    path.append(np.array(region))
                    path_iteration.append(total)
                    path_stage.append(s)
            it += b
            stability = float(np.max(stability_statistic(snapshot, counts))) if it > b else np.inf
            snapshot = counts.copy()
            if it >= K and (stability_tol is None or stability < stability_tol or it >= limit):
                break
        # Only ratios of ĝ are identified: keep Σ_i ĝ_i = 1 (also keeps numbers small).
        log_g -= logsumexp(log_g, axis=1, keepdims=True)
        log_g_stages.append(log_g.copy())
        lengths.append(it)
        stabilities.append(stability)
        stage_counts.append(counts)
        if callback is not None:
            callback(s, delta, log_g)
    return CMCCoreResult(
        log_g=log_g,
        log_g_stages=np.array(log_g_stages),
        deltas=deltas,
        stage_iterations=np.array(lengths),
        stability=np.array(stabilities),
        counts=np.array(stage_counts),
        path=np.array(path, dtype=int).reshape(-1, R),
        path_iteration=np.array(path_iteration, dtype=int),
        path_stage=np.array(path_stage, dtype=int),
        state=state,
    )
