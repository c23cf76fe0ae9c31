"""The Bayesian information criterion as a crude log evidence (Schwarz 1978; Barber's slides)."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from pymc_evidence._optimize import (
    fd_hessian,
    joint_objective,
    likelihood_objective,
    multistart,
    newton_decrement,
    newton_polish,
    starting_points,
)
from pymc_evidence._random import as_generator
from pymc_evidence._validation import choice, integer, resolve_model
from pymc_evidence.density import get_density
from pymc_evidence.results import BICResult, warn

__all__ = ["bic"]

POINTS = ("map", "mle")
#: θ̂ is a strict maximum when −H's smallest eigenvalue exceeds this × its largest (H by
#: finite differences, accurate to ~1e-10 relative).
STRICT_RTOL = 1e-8


def bic(
    model=None,
    *,
    at: str = "map",
    n: int | None = None,
    k: int | None = None,
    restarts: int = 4,
    start=None,
    random_seed=None,
    progressbar: bool = True,
    backend: str = "c",
) -> BICResult:
    r"""BIC approximation to the log evidence: the best-fit log likelihood minus a penalty.

    .. math::

        \log p(D \mid M) \approx \log p(D \mid \hat\theta) - \frac{k}{2} \log n

    (Barber's slides, "BIC"; Ghahramani & Rasmussen, lecture 12): the Laplace approximation
    with the Hessian replaced by :math:`n I_k` and the prior and :math:`2\pi` terms dropped, so
    it is accurate only to :math:`O(1)` as :math:`n \to \infty`. Returned on the log-evidence
    scale (larger is better), i.e. :math:`-\tfrac12` times the classical
    :math:`\mathrm{BIC} = k\log n - 2\log\hat L`.

    Parameters
    ----------
    model : pymc.Model, optional
        The model; taken from the ``with`` context when omitted. Continuous free variables
        only (the optimiser uses gradients).
    at : {"map", "mle"}, default "map"
        :math:`\hat\theta`: the mode of the log joint in the unconstrained space (prior with
        the transforms' log-Jacobians), or the maximum of the log likelihood alone (the prior
        ignored; found in the unconstrained space, so bounded parameters stay in bounds).
    n : int, optional
        Number of i.i.d. cases; default the leading dimension of the observed data (e.g. 200
        robot-arm cases, not 400 scalars).
    k : int, optional
        Number of free parameters; default the length of the unconstrained vector.
    restarts : int, default 4
        Optimisations started from exact prior draws; the best end point is used.
    start : dict or array_like, optional
        Extra starting point(s): a dict of value-variable values (like
        ``model.initial_point()``), a flat vector or an (m, d) matrix.
    random_seed : int, Generator or None
        Seeds the prior draws used as starting points.
    progressbar : bool, default True
        Show a progress bar over the optimisations.
    backend : {"c", "numba"}, default "c"
        PyTensor backend for the compiled density.

    Returns
    -------
    BICResult
        ``method="bic"``, ``se=0``. ``diagnostics`` has one row (index ``"point"``):
        ``log_likelihood``, ``log_prior``, ``penalty`` (:math:`\tfrac k2 \log n`), ``k``,
        ``n``, ``at``, ``grad_max`` and ``newton_decrement`` (of the maximised objective; the
        decrement ``½ gᵀH⁻¹g`` is the gain still expected, in nats) and ``converged``
        (decrement below 1e-6). The fields ``log_likelihood``,
        ``bic`` (the classical value), ``k`` and ``n`` repeat the ingredients.

    Warns
    -----
    EvidenceWarning
        When the optimiser did not reach a strict maximum (e.g. a likelihood that grows
        without bound, as a mixture's when a component collapses onto one point, or is flat
        along an unidentified direction), or optimisations from different
        starts ended at clearly different heights (the best is used).

    Notes
    -----
    1. Draw ``restarts`` prior points (after any ``start``); maximise the objective (log
       joint for ``"map"``, log likelihood for ``"mle"``) from each with L-BFGS-B.
    2. Polish the best end point with Newton steps (Hessian by central differences of the
       compiled gradient, one batched call), and check it is a strict maximum.
    3. Take that point :math:`\hat\theta` and return
       :math:`\log p(D\mid\hat\theta) - \tfrac k2 \log n`.

    Examples
    --------
    >>> import numpy as np, pymc as pm
    >>> import pymc_evidence as pm_evidence
    >>> with pm.Model() as model:
    ...     mu = pm.Normal("mu", 0, 10)
    ...     y = pm.Normal("y", mu, 1, observed=[0.3, -0.1, 0.5, 0.2])
    >>> res = pm_evidence.bic(model, at="mle", random_seed=0, progressbar=False)
    >>> round(res.log_evidence, 4)
    -4.4627

    See Also
    --------
    pymc_evidence.laplace

    References
    ----------
    Schwarz, G. (1978). Estimating the dimension of a model. Annals of Statistics 6, 461–464.
    """
    t_start = time.perf_counter()
    _validate_arguments(at, n, k, restarts, start)
    model = resolve_model(model)
    rng = as_generator(random_seed)
    density = get_density(model, backend=backend)
    n = density.n_cases if n is None else int(n)
    k = density.dim if k is None else int(k)
    t_density = time.perf_counter()

    best, hess, heights = _maximise(density, at, rng, restarts, start, progressbar)
    values = density(best.x[None, :])
    log_lik = float(values.log_likelihood[0])
    log_prior = float(values.log_prior[0])
    grad_max = float(np.max(np.abs(best.grad))) if best.grad.size else 0.0
    decrement = _decrement(best, hess)
    converged = bool(decrement < 1e-6)
    messages: list[str] = []
    _warn_on_soft_problems(messages, at, best, heights, decrement, grad_max)
    penalty = 0.5 * k * np.log(n)
    log_evidence = log_lik - penalty
    diagnostics = pd.DataFrame(
        [
            {
                "log_likelihood": log_lik,
                "log_prior": log_prior,
                "penalty": penalty,
                "k": k,
                "n": n,
                "at": at,
                "grad_max": grad_max,
                "newton_decrement": decrement,
                "converged": converged,
            }
        ]
    )
    diagnostics.index.name = "point"
    t_end = time.perf_counter()
    return BICResult(
        log_evidence=float(log_evidence),
        se=0.0,
        model_name=model.name or "",
        diagnostics=diagnostics,
        log_likelihood=log_lik,
        bic=float(-2 * log_evidence),
        k=k,
        n=n,
        settings={
            "at": at,
            "n": n,
            "k": k,
            "restarts": int(restarts),
            "start": None if start is None else "given",
            "backend": backend,
            "random_seed": random_seed if isinstance(random_seed, (int, type(None))) else "given",
        },
        timing={
            "density": t_density - t_start,
            "optimisation": t_end - t_density,
            "total": t_end - t_start,
        },
        warnings=messages,
    )


def _validate_arguments(at, n, k, restarts, start) -> None:
    """Raise on a bad argument before any work."""
    choice("at", at, POINTS)
    integer("n", n, 1, optional=True, why=" (the number of i.i.d. cases)")
    integer("k", k, 0, optional=True, why=" (the number of free parameters)")
    integer("restarts", restarts, 0)
    if restarts == 0 and start is None:
        raise ValueError("nothing to optimise: give restarts >= 1 or a start point")


def _maximise(density, at, rng, restarts, start, progressbar):
    """The best of the multi-start optimisations of the log likelihood (``at="mle"``) or log
    joint (``"map"``), Newton-polished; its Hessian; the heights every optimisation reached."""
    objective = joint_objective(density) if at == "map" else likelihood_objective(density)
    starts = starting_points(density, rng, restarts, start)
    optima = multistart(objective, starts, progressbar=progressbar, desc=f"bic: {at}")
    finite = [o for o in optima if np.isfinite(o.value)]
    if not finite:
        raise RuntimeError(
            "every optimisation ended at a non-finite log density, so BIC cannot be computed: "
            "check the data for NaN and the model's parameterisation (e.g. a scale that can be "
            "zero)"
        )
    best = max(finite, key=lambda o: o.value)
    part = "joint" if at == "map" else "likelihood"
    best, hess = newton_polish(objective, lambda z: fd_hessian(density, z, part), best)
    return best, hess, np.array([o.value for o in finite])


def _decrement(best, hess) -> float:
    """The Newton decrement ½ gᵀH⁻¹g at ``best``: nats still to gain; ∞ where the point is
    not a strict maximum (a flat, unidentified, or unbounded direction)."""
    eig = np.linalg.eigvalsh(-hess) if hess.size else np.ones(1)
    if eig[0] > STRICT_RTOL * abs(eig[-1]):
        return newton_decrement(best.grad, -hess)
    return np.inf


def _warn_on_soft_problems(messages, at, best, heights, decrement, grad_max) -> None:
    if not decrement < 1e-6:
        warn(
            messages,
            f"the optimiser did not converge to a strict maximum of the "
            f"{'log joint' if at == 'map' else 'log likelihood'} (Newton decrement "
            f"{decrement:.3g} nats, max |gradient| {grad_max:.3g}; {best.message}): the BIC is "
            "unreliable. With at='mle' the likelihood may be unbounded or flat in some "
            "direction (unidentified parameters): try at='map'.",
            stacklevel=4,
        )
    if np.any(heights < best.value - 1.0):
        warn(
            messages,
            f"optimisations from different starts ended at different heights (best "
            f"{best.value:.4f}, worst {heights.min():.4f}): the objective is multimodal; the "
            "best point was used",
            stacklevel=4,
        )
