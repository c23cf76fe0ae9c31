"""Finding modes of a compiled model density: objectives, multi-start optimisation, polishing.

Shared by :func:`pymc_evidence.laplace` and :func:`pymc_evidence.bic`. Everything works on the
flat unconstrained vector of :class:`pymc_evidence.density.ModelDensity`, so the mode found is
the mode of the density the evidence integrates (with the transforms' log-Jacobians), not the
constrained-space mode ``pm.find_MAP`` returns.

An *objective* is a callable ``x (d,) -> (value, gradient)`` to be **maximised**.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy import optimize

__all__ = [
    "Optimum",
    "joint_objective",
    "likelihood_objective",
    "maximize",
    "multistart",
    "newton_polish",
    "climb",
    "trust_region_maximize",
    "escape_saddles",
    "fd_hessian",
    "hessian_mismatch",
    "starting_points",
]

Objective = Callable[[np.ndarray], tuple[float, np.ndarray]]


class Optimum(NamedTuple):
    """Where one optimisation ended."""

    x: np.ndarray  # (d,) the point
    value: float  # objective at x
    grad: np.ndarray  # (d,) its gradient
    success: bool  # scipy's own success flag
    message: str
    n_evaluations: int
    start: int  # index of the starting point it came from


def joint_objective(density) -> Objective:
    """log prior + log likelihood (the unnormalised log posterior) and its gradient."""

    def objective(x):
        values = density(x[None, :])
        value = float(values.log_prior[0] + values.log_likelihood[0])
        grad = values.grad_log_prior[0] + values.grad_log_likelihood[0]
        return value, np.asarray(grad, dtype=float)

    return objective


def likelihood_objective(density) -> Objective:
    """log likelihood alone (for the maximum-likelihood point) and its gradient."""

    def objective(x):
        values = density(x[None, :])
        return float(values.log_likelihood[0]), np.asarray(values.grad_log_likelihood[0], float)

    return objective


def maximize(
    objective: Objective, x0: np.ndarray, *, start: int = 0, maxiter: int = 20_000
) -> Optimum:
    """Maximise ``objective`` from ``x0`` with L-BFGS-B and the compiled gradient.

    Non-finite values (points outside the support) are reported to the optimiser as ``+inf``
    loss, so its line search backs off from them.
    """
    return _minimize_loss(
        objective, x0, start, method="L-BFGS-B",
        options={"maxiter": maxiter, "maxfun": 2 * maxiter, "ftol": 1e-15, "gtol": 1e-10},
    )


def _minimize_loss(objective: Objective, x0, start: int, **minimize_options) -> Optimum:
    """scipy's ``minimize`` on −objective, non-finite values as ``+inf``; the end as an Optimum."""
    n_eval = 0

    def loss(x):
        nonlocal n_eval
        n_eval += 1
        value, grad = objective(x)
        if not np.isfinite(value) or not np.all(np.isfinite(grad)):
            return np.inf, np.zeros_like(x)
        return -value, -grad

    res = optimize.minimize(loss, np.asarray(x0, dtype=float), jac=True, **minimize_options)
    value, grad = objective(res.x)
    return Optimum(
        x=np.asarray(res.x, dtype=float),
        value=float(value),
        grad=np.asarray(grad, dtype=float),
        success=bool(res.success),
        message=str(res.message),
        n_evaluations=n_eval,
        start=start,
    )


def newton_polish(
    objective: Objective,
    hessian: Callable[[np.ndarray], np.ndarray],
    opt: Optimum,
    *,
    steps: int = 8,
    tol: float = 1e-12,
) -> tuple[Optimum, np.ndarray]:
    """Refine a maximum with Newton steps on the exact Hessian.

    A step is taken only while the negative Hessian is positive definite (smallest eigenvalue
    above 1e-10 × the largest: no huge steps along flat directions) and is halved until it
    does not lower the objective; it stops once the Newton decrement ``½ gᵀH⁻¹g`` (the
    predicted gain, in nats) is below ``tol``. Returns the (possibly unchanged) optimum and the
    Hessian of the objective at its point.
    """
    x, value, grad = opt.x, opt.value, opt.grad
    hess = hessian(x)
    n_eval = opt.n_evaluations
    for _ in range(steps):
        eig = np.linalg.eigvalsh(-hess)
        if not eig[0] > 1e-10 * abs(eig[-1]):  # not safely positive definite: no step
            break
        step = _chol_solve(np.linalg.cholesky(-hess), grad)
        decrement = 0.5 * float(grad @ step)
        if not np.isfinite(decrement) or decrement < tol:
            break
        for _halving in range(30):
            value_new, grad_new = objective(x + step)
            n_eval += 1
            if np.isfinite(value_new) and value_new >= value - 1e-12 * max(1.0, abs(value)):
                break
            step = step / 2
        else:
            break
        x, value, grad = x + step, value_new, grad_new
        hess = hessian(x)
    polished = opt._replace(x=x, value=float(value), grad=grad, n_evaluations=n_eval)
    return polished, hess


def climb(
    objective: Objective,
    hessian: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    *,
    start: int = 0,
    newton_steps: int = 50,
) -> tuple[Optimum, np.ndarray]:
    """The mode near a point already close to one: Newton steps first (cheap when the point is
    the mode of a slightly different objective), then, if they do not converge (the Hessian is
    not positive definite on the way), a trust-region Newton method on the exact Hessian
    (scipy's ``trust-exact``, which also follows directions of negative curvature), and Newton
    again to polish. On a curved ridge, such as an MLP's, this takes tens of iterations where
    L-BFGS takes thousands.
    """
    value, grad = objective(np.asarray(x0, float))
    opt = Optimum(np.asarray(x0, float), float(value), grad, True, "Newton", 1, start)
    opt, hess = newton_polish(objective, hessian, opt, steps=newton_steps)
    try:
        done = newton_decrement(opt.grad, -hess) < 1e-9
    except np.linalg.LinAlgError:
        done = False
    if not done:
        opt = trust_region_maximize(objective, hessian, opt.x, start=start)
        opt, hess = newton_polish(objective, hessian, opt)
    return opt, hess


def trust_region_maximize(
    objective: Objective,
    hessian: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    *,
    start: int = 0,
    maxiter: int = 1000,
) -> Optimum:
    """Maximise ``objective`` from ``x0`` by scipy's ``trust-exact`` on the exact Hessian.

    Non-finite values are reported as ``+inf`` loss, which shrinks the trust region. Where the
    Hessian stops ``trust-exact`` (non-finite entries: ``ValueError``; a subproblem that ends
    without a step: scipy's ``UnboundLocalError``, seen on the robot-arm MLP), the start is
    maximised by L-BFGS instead, so one bad start does not end a long fit.
    """
    try:
        return _minimize_loss(
            objective, x0, start, method="trust-exact", hess=lambda x: -hessian(x),
            options={"maxiter": maxiter, "gtol": 1e-10},
        )
    except (ValueError, UnboundLocalError, np.linalg.LinAlgError):
        return maximize(objective, x0, start=start)


def escape_saddles(
    objective: Objective,
    hessian: Callable[[np.ndarray], np.ndarray],
    opt: Optimum,
    hess: np.ndarray,
    *,
    max_escapes: int = 8,
) -> tuple[Optimum, np.ndarray, int]:
    """Climb off a saddle: from a stationary point whose Hessian has a direction of positive
    curvature of the objective, step along the steepest such direction and maximise again.

    L-BFGS stops wherever the gradient vanishes; on an MLP's posterior that can be a saddle
    (a hidden unit with zero outgoing weight, whose incoming weights then see the residuals
    only through a cross term), where the Laplace approximation does not exist. Along the
    eigenvector ``v`` of the most negative eigenvalue ``λ < 0`` of ``H = −∇∇ objective`` the
    objective rises by about ``½|λ|t²``: the step ``t = √(2/|λ|)`` (one predicted nat, or a
    tenth / ten times that, in either direction; the best that gains) leaves the saddle, and
    L-BFGS with a Newton polish climbs to the next stationary point. Repeats at most
    ``max_escapes`` times; returns the point reached, its Hessian and the number of escapes.
    A point where the optimiser did not converge is no saddle and is returned as it is.
    """
    for escapes in range(max_escapes):
        if not opt.success:
            return opt, hess, escapes
        eigenvalues, vectors = np.linalg.eigh(-hess)
        if not eigenvalues[0] < -1e-8 * max(abs(eigenvalues[-1]), 1e-300):
            return opt, hess, escapes
        direction = vectors[:, 0]
        length = np.sqrt(2.0 / abs(eigenvalues[0]))
        trials = [opt.x + sign * scale * length * direction
                  for scale in (1.0, 0.1, 10.0) for sign in (1.0, -1.0)]
        values = [objective(x)[0] for x in trials]
        best = int(np.argmax(np.where(np.isfinite(values), values, -np.inf)))
        if not values[best] > opt.value:
            return opt, hess, escapes
        climbed = maximize(objective, trials[best], start=opt.start)
        climbed, climbed_hess = newton_polish(objective, hessian, climbed)
        if not climbed.value > opt.value:
            return opt, hess, escapes
        n_evaluations = opt.n_evaluations + len(trials) + climbed.n_evaluations
        opt, hess = climbed._replace(n_evaluations=n_evaluations), climbed_hess
    return opt, hess, max_escapes


def newton_decrement(grad: np.ndarray, neg_hess: np.ndarray) -> float:
    """``½ gᵀ H⁻¹ g`` for a positive-definite ``H``: how far (in nats) the point is from the top."""
    chol = np.linalg.cholesky(neg_hess)
    return 0.5 * float(grad @ _chol_solve(chol, grad))


def _chol_solve(chol: np.ndarray, b: np.ndarray) -> np.ndarray:
    from scipy.linalg import solve_triangular

    y = solve_triangular(chol, b, lower=True)
    return solve_triangular(chol.T, y, lower=False)


def fd_hessian(density, x: np.ndarray, part: str = "prior", rel_step: float = 1e-5) -> np.ndarray:
    """Hessian of the log prior, log likelihood or log joint at ``x`` by central differences
    of the compiled gradient.

    All ``2d`` shifted points are evaluated in one batched call; the result is symmetrised.
    Accurate to about ``rel_step²`` relative: ample for diagnostics (the effective number of
    parameters) and for Newton steps, whose fixed point is set by the exact gradient.
    """
    x = np.asarray(x, dtype=float)
    d = x.size
    h = rel_step * np.maximum(1.0, np.abs(x))
    shifts = np.diag(h)
    values = density(np.concatenate([x + shifts, x - shifts]))
    if part == "prior":
        grads = values.grad_log_prior
    elif part == "likelihood":
        grads = values.grad_log_likelihood
    elif part == "joint":
        grads = values.grad_log_prior + values.grad_log_likelihood
    else:
        raise ValueError(f"part must be 'prior', 'likelihood' or 'joint', got {part!r}")
    hess = (grads[:d] - grads[d:]) / (2 * h[:, None])
    return 0.5 * (hess + hess.T)


#: The exact Hessian is trusted when it agrees with central differences of the gradient to this
#: fraction of its largest entry (differences are accurate to ~1e-8 of it).
HESSIAN_RTOL = 1e-4


def hessian_mismatch(density, x: np.ndarray, hess: np.ndarray) -> tuple[float, np.ndarray]:
    """How far the exact Hessian of the log joint at ``x`` is from finite differences of the
    compiled gradient: (largest difference / largest entry, the finite-difference Hessian).

    A guard against a wrong Hessian graph (PyTensor has produced one for ``dims=`` variables):
    the gradient drives the optimiser and the samplers and is checked by them; the Hessian
    enters only ``log det H``, where an error would pass silently.
    """
    fd = fd_hessian(density, x, "joint")
    scale = max(float(np.max(np.abs(fd))), 1.0)
    return float(np.max(np.abs(hess - fd))) / scale, fd


def starting_points(density, rng: np.random.Generator, restarts: int, start=None) -> np.ndarray:
    """The user's starting points (if any) followed by ``restarts`` exact prior draws.

    ``start`` may be a dict of value-variable values (as :meth:`pymc.Model.initial_point`
    returns, e.g. ``{"sigma_log__": 0.0, ...}``), a flat vector (d,), or a matrix (m, d).
    """
    rows = []
    if start is not None:
        rows.append(flatten_start(density, start))
    if restarts > 0:
        rows.append(density.prior_draws(rng, restarts))
    if not rows:
        raise ValueError("nothing to optimise: give restarts >= 1 or a start point")
    return np.concatenate(rows).astype(float)


def flatten_start(density, start) -> np.ndarray:
    """A user-given start (dict of value variables, vector or matrix) as an (m, d) array."""
    if isinstance(start, dict):
        missing = [name for name in density.names if name not in start]
        if missing:
            raise ValueError(
                f"start is missing value variables {missing}; it needs every one of "
                f"{density.names} (unconstrained names, as model.initial_point() has them)"
            )
        parts = [
            np.broadcast_to(np.asarray(start[name], float), shape).ravel()
            for name, shape in zip(density.names, density.shapes)
        ]
        return np.concatenate(parts)[None, :]
    array = np.atleast_2d(np.asarray(start, dtype=float))
    if array.ndim != 2 or array.shape[1] != density.dim:
        raise ValueError(
            f"start must be a dict of value variables, a vector of length {density.dim} or a "
            f"matrix with {density.dim} columns; got shape {np.shape(start)}"
        )
    return array


def multistart(
    objective: Objective,
    starts: np.ndarray,
    *,
    progressbar: bool = True,
    desc: str = "optimising",
    hessian: Callable[[np.ndarray], np.ndarray] | None = None,
) -> list[Optimum]:
    """Maximise ``objective`` from every row of ``starts``; one :class:`Optimum` per row.

    L-BFGS, or with ``hessian`` the trust-region Newton method on it
    (:func:`trust_region_maximize`): from an MLP's prior draws it climbs the curved ridges to
    the high modes that L-BFGS stops short of, in fewer seconds. Starts where the objective
    is not finite are skipped (reported by the caller through the number of optima returned).
    """
    optima = []
    iterator = range(len(starts))
    bar = None
    if progressbar:
        from tqdm.auto import tqdm

        bar = tqdm(iterator, desc=desc, total=len(starts))
        iterator = bar
    best = -np.inf
    for i in iterator:
        value, _ = objective(starts[i])
        if not np.isfinite(value):
            continue
        if hessian is None:
            opt = maximize(objective, starts[i], start=i)
        else:
            opt = trust_region_maximize(objective, hessian, starts[i], start=i)
        optima.append(opt)
        if bar is not None and np.isfinite(opt.value):
            best = max(best, opt.value)
            bar.set_postfix_str(f"best {best:.4g}")
    if bar is not None:
        bar.close()
    return optima
