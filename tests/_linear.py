"""The Bayesian linear regression with known noise that test_bic and test_laplace check against
closed forms (MLE, MAP, Hessian, evidence)."""

from __future__ import annotations

import numpy as np
import pymc as pm

N_OBS, N_SLOPES, NOISE_SD = 25, 3, 0.7
PRIOR_SD = np.array([3.0, 2.0, 2.0, 2.0])  # intercept, slopes


def linear_regression():
    """``(model, design, y)``: y ~ N(a + X b, NOISE_SD²), a ~ N(0, 3²), b ~ N(0, 2² I)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N_OBS, N_SLOPES))
    y = 2.0 + X @ np.array([1.0, -0.5, 0.3]) + NOISE_SD * rng.normal(size=N_OBS)
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, PRIOR_SD[0])
        b = pm.Normal("b", 0.0, PRIOR_SD[1], shape=N_SLOPES)
        pm.Normal("y", a + pm.math.dot(X, b), NOISE_SD, observed=y)
    return model, np.column_stack([np.ones(N_OBS), X]), y
