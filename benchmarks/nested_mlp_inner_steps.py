"""How many slice moves per replacement nested sampling needs on Bayesian MLPs.

On an MLP posterior the constrained prior is curved along the hyperparameters (an output
weight w = z/√α of the non-centred model moves along a curve as α shrinks), and replacements
that move too little leave the live points lagging behind the contracting region: each run's
contour log L* rises too slowly with log X and its evidence comes out low, by more than its own
error bar. This study runs ``pm_evidence.nested`` on two MLPs at several ``num_inner_steps``
(multiples of the dimension d), a fixed number of independent runs each, beside thermodynamic
chaining as an independent reference:

* ``robot_arm_mlp(2)`` (17 parameters, Neal-style gamma hyperpriors), ``ROBOT_ARM_LAYER``;
* Liang's example-1 MLP with H = 3 hidden units (``liang_mlp(3, *liang_data())``, 10
  parameters, output weights integrated out), ``MLPLayer("z_in", bias="z_bias")``.

Written: ``benchmarks/results/nested_mlp_inner_steps.csv`` (one row per run) and ``.md``.

Usage::

    python benchmarks/nested_mlp_inner_steps.py            # about 30 minutes on 2 cores
"""

from __future__ import annotations

import datetime
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import pymc_evidence as pm_evidence
from pymc_evidence import MLPLayer
from pymc_evidence.testing import ROBOT_ARM_LAYER, liang_data, liang_mlp, robot_arm_mlp

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "benchmarks" / "results" / "nested_mlp_inner_steps.csv"
MARKDOWN = CSV.with_suffix(".md")
#: (name, model factory, layer, [(moves per parameter, runs)], chaining settings)
CASES = [
    ("robot arm h=2", lambda: robot_arm_mlp(2), ROBOT_ARM_LAYER, [(5, 6), (20, 6), (40, 2)],
     dict(n_particles=64, n_groups=4, max_groups=4, target_cess=0.95, target_se=0.3)),
    ("Liang H=3", lambda: liang_mlp(3, *liang_data()), MLPLayer("z_in", bias="z_bias"),
     [(5, 6), (20, 6), (40, 4)], dict(n_particles=128, n_groups=4, max_groups=8)),
]


def main() -> int:
    rows = []
    for case_index, (name, build, layer, grid, chaining) in enumerate(CASES):
        model = build()
        dim = pm_evidence.get_density(model).dim
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
            begun = time.perf_counter()
            reference = pm_evidence.thermodynamic(model, mlp_layers=layer, random_seed=1,
                                                  progressbar=False, **chaining)
            rows.append({"case": name, "dim": dim, "method": "thermodynamic", "inner_per_dim": 0,
                         "run": 0, "log_z": reference.log_evidence, "se": reference.se,
                         "seconds": time.perf_counter() - begun})
            for multiple, runs in grid:
                begun = time.perf_counter()
                result = pm_evidence.nested(
                    model, mlp_layers=layer, num_inner_steps=multiple * dim, n_runs=runs,
                    max_runs=runs, target_se=None, random_seed=100 * case_index + multiple,
                    progressbar=False, cores=2,
                )
                seconds = (time.perf_counter() - begun) / runs
                for run, (log_z, se) in enumerate(zip(result.run_log_evidence, result.run_se)):
                    rows.append({"case": name, "dim": dim, "method": "nested",
                                 "inner_per_dim": multiple, "run": run, "log_z": log_z,
                                 "se": se, "seconds": seconds})
                print(f"{name}: {multiple} d moves, {result.log_evidence:.2f} ± "
                      f"{result.se:.2f}", flush=True)
    table = pd.DataFrame(rows)
    table.to_csv(CSV, index=False)
    MARKDOWN.write_text(summarise(table))
    print(MARKDOWN.read_text())
    return 0


def summarise(table: pd.DataFrame) -> str:
    import pymc as pm

    lines = [
        "# Nested sampling on MLPs: slice moves per replacement",
        "",
        f"Written by `benchmarks/nested_mlp_inner_steps.py` on {datetime.date.today()} "
        f"(Python {platform.python_version()}, PyMC {pm.__version__}, {os.cpu_count()} cores). "
        "Nested: default `n_live` (25 d), `mlp_layers`, `target_se=None`, a fixed number of "
        "independent runs per setting; mean ± SE of the mean of the runs, the runs' standard "
        "deviation against their median own SE (≈ 1 when the runs' error bars describe their "
        "spread), and the mean of the runs minus the chaining reference in units of the "
        "combined SE. Seconds: per run, two runs at a time on two cores.",
        "",
        "| model | d | moves per replacement | runs | log Z | run SD / run SE "
        "| Δ to chaining (SE) | s per run |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, rows in table.groupby("case", sort=False):
        ref = rows[rows["method"] == "thermodynamic"].iloc[0]
        for multiple, runs in rows[rows["method"] == "nested"].groupby("inner_per_dim"):
            count, mean, sd = len(runs), runs["log_z"].mean(), runs["log_z"].std(ddof=1)
            # nested's SE: the larger of the runs' own errors combined and their spread
            se = max(sd / np.sqrt(count), float(np.sqrt(np.sum(runs["se"] ** 2))) / count)
            delta = (mean - ref["log_z"]) / np.hypot(se, ref["se"])
            lines.append(
                f"| {name} | {ref['dim']} | {multiple} d | {count} | {mean:.2f} ± {se:.2f} "
                f"| {sd / runs['se'].median():.2f} | {delta:+.1f} "
                f"| {runs['seconds'].iloc[0]:.0f} |")
        lines.append(f"| {name} | {ref['dim']} | chaining | | {ref['log_z']:.2f} ± "
                     f"{ref['se']:.2f} | | | {ref['seconds']:.0f} (whole fit) |")
    lines += ["", "Runs per setting, each run's log Z and SE: `nested_mlp_inner_steps.csv`.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
