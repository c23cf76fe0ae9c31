"""Does the tempering from a found mode give the exact evidence of exchangeable units?

On exchangeable units with an exact evidence (``testing.unit_regression(3, ...)``, 13
parameters, the units' permutations a symmetry whose mode they all share: the hardest case
for the reference's fold), ``thermodynamic(model, mlp_layers=layer, mode_search=True,
n_particles=128, target_se=None, effort_check=False, random_seed=s)`` for s = 1…N: each fit's
tempering from the mode gives one estimate per relaxation level. Reported: the last level's
error in units of its SE (mean, RMS, share within 2 SE), how many fits relaxed more than once,
and the seconds per fit.

Written: ``benchmarks/results/from_mode_kernel.md``.

Usage::

    python benchmarks/from_mode_kernel.py --seeds 48     # about 5 minutes on one core
"""

from __future__ import annotations

import argparse
import datetime
import platform
import time
import warnings
from pathlib import Path

import numpy as np
import pymc

import pymc_evidence as pm_evidence
from pymc_evidence import testing

RESULTS = Path(__file__).parent / "results" / "from_mode_kernel.md"
LAYER = pm_evidence.MLPLayer("W", output="v", bias="b", activation="relu")


def _model():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(25, 2))
    y = 0.3 + x @ np.array([0.8, -0.5]) + 0.4 * x[:, 0] ** 2 + 0.5 * rng.normal(size=25)
    return testing.unit_regression(3, x, y)


def fit(model, exact: float, seed: int) -> dict:
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = pm_evidence.thermodynamic(
            model, mlp_layers=LAYER, n_particles=128, target_se=None, effort_check=False,
            mode_search=True, random_seed=seed, progressbar=False)
    log_z = np.atleast_1d(result.reference_log_evidence)
    se = np.atleast_1d(result.reference_se)
    return dict(seed=seed, levels=len(log_z), log_z=float(log_z[-1]), se=float(se[-1]),
                z=float((log_z[-1] - exact) / se[-1]), seconds=time.perf_counter() - start)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=48)
    args = parser.parse_args(argv)
    model, exact = _model()
    rows = [fit(model, exact, seed) for seed in range(1, args.seeds + 1)]
    z = np.array([row["z"] for row in rows])
    seconds = np.array([row["seconds"] for row in rows])
    lines = [
        "# Tempering from a found mode on exchangeable units with an exact evidence",
        "",
        f"Written by `python benchmarks/from_mode_kernel.py --seeds {args.seeds}` on "
        f"{datetime.date.today()} (Python {platform.python_version()}, PyMC "
        f"{pymc.__version__}). Exact log evidence {exact:.3f}.",
        "",
        "| fits | mean z | RMS z | within 2 SE | levels > 1 | median s per fit |",
        "|--:|--:|--:|--:|--:|--:|",
        f"| {len(rows)} | {z.mean():+.2f} | {np.sqrt(np.mean(z**2)):.2f} | "
        f"{np.mean(np.abs(z) < 2):.0%} | {sum(row['levels'] > 1 for row in rows)} | "
        f"{np.median(seconds):.0f} |",
        "",
        "z: the last level's error over its SE. Per fit (seed: log Z ± SE, levels):",
        "",
        ", ".join(f"{row['seed']}: {row['log_z']:.3f} ± {row['se']:.3f} ({row['levels']})"
                  for row in rows),
        "",
    ]
    RESULTS.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
