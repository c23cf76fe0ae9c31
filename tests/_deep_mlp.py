"""A two-hidden-layer tanh network, the smallest deeper MLP: tests of layer recognition and of
which layer's copies the estimators align and count."""

from __future__ import annotations

import numpy as np
import pymc as pm

from pymc_evidence.symmetry import MLPLayer

#: Its two layers as MLPLayer: the first's outputs are the second's input weights.
LAYERS = (MLPLayer("w1", output="w2", bias="b1"), MLPLayer("w2", output="v", bias="b2"))


def two_layer_mlp(first: int, second: int, points: int = 8) -> pm.Model:
    """y ~ N(tanh(tanh(x W1 + b1) W2 + b2) v, 0.1²) on ``points`` inputs in [-1, 1], with
    ``first`` and ``second`` hidden units and standard normal priors on every weight."""
    x = np.linspace(-1, 1, points)[:, None]
    with pm.Model() as model:
        w1, b1 = pm.Normal("w1", 0, 1, shape=(1, first)), pm.Normal("b1", 0, 1, shape=first)
        w2 = pm.Normal("w2", 0, 1, shape=(first, second))
        b2, v = pm.Normal("b2", 0, 1, shape=second), pm.Normal("v", 0, 1, shape=second)
        hidden = pm.math.tanh(pm.math.tanh(x @ w1 + b1) @ w2 + b2)
        pm.Normal("y", hidden @ v, 0.1, observed=np.sin(3 * x[:, 0]))
    return model
