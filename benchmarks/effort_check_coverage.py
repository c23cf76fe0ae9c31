"""Does nested sampling's moves check keep its error bars honest, and which biases can it see?

Pure statistics, no model: runs whose log Z are drawn N(b_k, s²) at check level k (b_k = b /
2^k: a bias b at the first level that halves each time the moves double, the law the check's
bound assumes; s = 0.33, the runs' SE on Liang's MLPs at 40 d), fed to ``nested``'s own
decision code (``_moves_check``) and SE (``_combine``, ``_warn_on_moves``). Two designs: the
one Liang's MLPs meet at the defaults (16 runs, then 2 per check level, ``max_runs=16``), and
4 runs per level throughout (like chaining's effort check, four groups per level).

For each bias and design: the share of fits whose check went past its first doubling, the
share of all fits beyond 2 and 3 SE of the truth, and among the fits that went on, the share
beyond 2 SE with the SE as reported and with the SE the check gave before it treated those
fits apart (no distance to the set-aside first level, the last move bounded by
√max(0, δ² − c²) rather than |δ| + c).

Written: ``benchmarks/results/effort_check_coverage.md``.

Usage::

    python benchmarks/effort_check_coverage.py --fits 4000     # about 2 minutes on one core
"""

from __future__ import annotations

import argparse
import datetime
import platform
import warnings
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pymc

from pymc_evidence.estimators import nested
from pymc_evidence.estimators._stepping_stone import pooled_levels_bias

RESULTS = Path(__file__).parent / "results" / "effort_check_coverage.md"
RUN_SE = 0.33
BIASES = (0.0, -0.1, -0.3, -0.6, -1.0, -2.0)
#: (first-level runs, runs per check level, max_runs)
DESIGNS = ((16, 2, 16), (4, 4, 32))


def fit(rng, bias: float, design) -> tuple[float, float, float, bool]:
    """One fit: (estimate, SE, SE as before, went past the first doubling)."""
    base_runs, check_runs, max_runs = design

    def run(level):
        return SimpleNamespace(log_z=rng.normal(bias / 2**level, RUN_SE), log_z_se=RUN_SE)

    saved = {"checks": []}

    def batch(level, todo, wanted):
        saved["checks"][level - 1].extend(run(level) for _ in todo)

    settings = {"n_runs": check_runs, "num_inner_steps": 1, "max_runs": max_runs}
    check = nested._moves_check([run(0) for _ in range(base_runs)], saved, settings, batch)
    log_z, se, _, _ = nested._combine(check.runs)
    reported = nested._warn_on_moves([], check, log_z, se)
    with (mock.patch.object(nested, "set_aside_level_bias", return_value=0.0),
          mock.patch.object(nested, "pooled_levels_bias", _unshown_bias)):
        before = nested._warn_on_moves([], check, log_z, se)
    return log_z, reported, before, len(check.levels) > 2


def _unshown_bias(move, noise, lower_share, bias_shown=False):
    return pooled_levels_bias(move, noise, lower_share)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fits", type=int, default=4000)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for design in DESIGNS:
            for bias in BIASES:
                out = np.array([fit(rng, bias, design) for _ in range(args.fits)])
                z, z_before = out[:, 0] / out[:, 1], out[:, 0] / out[:, 2]
                went_on = out[:, 3] > 0
                rows.append(
                    f"| {design[0]}, then {design[1]} | {bias:+.1f} | {np.mean(went_on):.0%} | "
                    f"{np.sqrt(np.mean(out[:, 0] ** 2)):.3f} | {np.median(out[:, 1]):.3f} | "
                    f"{np.mean(np.abs(z) > 2):.1%} | {np.mean(np.abs(z) > 3):.1%} | "
                    f"{np.mean(np.abs(z[went_on]) > 2):.0%} | "
                    f"{np.mean(np.abs(z_before[went_on]) > 2):.0%} |")
    today = datetime.date.today().isoformat()
    text = f"""# The moves check's error bars on runs with a known bias

Written by `python benchmarks/effort_check_coverage.py --fits {args.fits}` on {today} (Python \
{platform.python_version()}, PyMC {pymc.__version__}). No model: each fit's runs are drawn \
N(b / 2^k, {RUN_SE}²) at check level k, b the first level's bias (halving each time the moves \
double), and go through `nested`'s own moves check and SE. Truth 0.

Runs: at the first level, then per check level. Went on: the check went past its first \
doubling (the first level set aside). z = estimate / SE. Went on, beyond 2 SE: among those \
fits, with the SE reported and with the SE as the check gave it before it treated them apart \
(no distance to the set-aside first level; the last move bounded by √max(0, δ² − c²), not \
|δ| + c).

| runs | bias b | went on | RMSE | median SE | beyond 2 SE | beyond 3 SE | went on: beyond 2 SE | the same, as before |
|---|--:|--:|--:|--:|--:|--:|--:|--:|
""" + "\n".join(rows) + """

- **Without a bias** the error bars are calibrated. A check goes past its first doubling on
  noise alone in about 4 % of fits; those pool a level chosen for having moved, and before the
  distance to the set-aside first level entered their SE about one in five fell beyond 2 SE.
- **Once the check has gone on, the SE covers the bias.** A doubling that moved the estimate
  shows a bias; bounding the last move by √max(0, δ² − c²), an estimate of the true move that
  the noise c often zeroes, left half of the fits with a 2-nat bias beyond 2 SE. With |δ| + c,
  none; their SEs are then near a nat, as wide as what two runs per level can tell.
- **A bias smaller than about twice the check's noise passes unseen.** The first comparison is
  against 2 runs at twice the moves, whose SE is 0.23 nats; a bias of 0.3 nats that halves
  moves the estimate by 0.15, which that noise hides, and the pooled estimate keeps most of
  the bias with an SE of 0.09 (biases of 0.3–1 nat: 30–63 % beyond 2 SE). The check guards
  against lags of a nat and more (the 5 d and 20 d rows of `nested_mlp_inner_steps.md`); it
  does not prove a smaller one absent. At the default 40 d, nested sampling on Liang's MLPs
  and the robot arm at h = 1 sits within its SEs of importance sampling
  (`mlp_calibration.md`, `liang_reference.md`). Four runs per level (a balanced design, like
  chaining's effort check) narrow the blind spot somewhat; only more runs per level would
  close it, at their cost.
- **Large biases that stop halving** (the robot arm at h = 4 with 20 d moves) are what the
  unsettled branch and its warning are for; this law does not model them.
"""
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
