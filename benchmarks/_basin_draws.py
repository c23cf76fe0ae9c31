"""Posterior draws of the collapsed robot-arm MLP (:mod:`_collapsed_robot_arm`) from each basin
of its log density that an optimiser finds, to shape an importance-sampling proposal.

From h = 3 the λ = 1 particles of a chaining run leave the proposal fitted to them an ESS of
5–12 of 400,000: the posterior has dozens of basins (after the symmetries are removed), each
far from Gaussian. Here L-BFGS climbs log p(w) + log p(D | w) from many starts; optima
within ``within`` nats of the best and more than 4 Laplace standard deviations from every basin
kept before are basins, and a random-walk Metropolis run inside each (its covariance the
inverse Hessian, then the draws' own) gives that basin's draws. Nothing here tempers, and the
draws only shape the proposal: importance sampling's estimate stays unbiased whatever they are.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize

#: Random-walk Metropolis: walkers per basin, steps with the Laplace covariance then with the
#: draws' covariance (the last two thirds of each kept), draws kept per basin.
WALKERS, STEPS, DRAWS_PER_BASIN = 200, (300, 900), 5000


def climb(model, starts: np.ndarray, maxiter: int = 5000, gtol: float = 1e-7) -> list:
    """L-BFGS from each of ``starts`` (points × dim) up log p(w, D): (log p(w, D), point) of
    every end point, best first."""
    optima = []
    for start in starts:
        fit = minimize(lambda w: tuple(-v for v in model.log_joint_and_gradient(w)), start,
                       jac=True, method="L-BFGS-B", options=dict(maxiter=maxiter, gtol=gtol))
        optima.append((-fit.fun, fit.x))
    optima.sort(key=lambda item: -item[0])
    return optima


def basin_draws(model, starts: np.ndarray, rng, within: float = 15.0) -> tuple[np.ndarray, list]:
    """Draws from each basin reached from ``starts`` (points × dim) and the basins' highest
    log p(w, D), best first."""
    optima = climb(model, starts)
    best = optima[0][0]
    points = model.align(np.array([x for _, x in optima]))
    basins = []  # (log joint, point, Hessian of −log joint)
    for (value, _), point in zip(optima, points):
        if value < best - within:
            break
        if all((point - other) @ H @ (point - other) > 16 for _, other, H in basins):
            H = _hessian(model, point)
            if np.linalg.eigvalsh(H).min() > 0:  # a saddle or a flat ridge is not a basin
                basins.append((value, point, H))
    draws = []
    for _, point, H in basins:
        local = _random_walk(model, point, np.linalg.inv(H), rng, STEPS[0])
        local = _random_walk(model, local.mean(0), np.cov(local.T), rng, STEPS[1])
        draws.append(local[rng.choice(len(local), DRAWS_PER_BASIN, replace=False)])
    return np.concatenate(draws), [value for value, _, _ in basins]


def _hessian(model, point, step=1e-5):
    """Hessian of −log p(w, D) by central differences of the analytic gradient."""
    def gradient(at):
        return model.log_joint_and_gradient(at)[1]

    rows = np.array([(gradient(point - e) - gradient(point + e)) / (2 * step)
                     for e in step * np.eye(point.size)])
    return (rows + rows.T) / 2


def _random_walk(model, centre, covariance, rng, steps):
    """Metropolis draws (the last two thirds of ``steps``) of ``WALKERS`` walkers started near
    ``centre``, proposals N(0, 2.38² / d · covariance)."""
    d = centre.size
    chol = np.linalg.cholesky(covariance * 2.38**2 / d + 1e-12 * np.eye(d))
    x = centre + 0.3 * rng.standard_normal((WALKERS, d)) @ chol.T
    log_joint = np.add(*model.log_densities(x))
    kept = []
    for step in range(steps):
        proposal = x + rng.standard_normal((WALKERS, d)) @ chol.T
        proposed = np.add(*model.log_densities(proposal))
        accept = np.log(rng.random(WALKERS)) < proposed - log_joint
        x[accept], log_joint[accept] = proposal[accept], proposed[accept]
        if step >= steps // 3:
            kept.append(x.copy())
    return np.concatenate(kept)
