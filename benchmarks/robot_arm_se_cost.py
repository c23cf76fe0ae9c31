"""What SE ≤ 0.3 nat costs on the robot-arm MLP: the groups' spread against population size.

The robot-arm curve (``robot_arm_curve.py``) reaches its target SE ≤ 0.3 only for h ≤ 2. This
study asks what the rest would cost. It runs chaining as the curve does (``mlp_layers``, 4
groups, ``target_cess=0.95``, seed = h) at h = 4 and 8 with 64, 128 and 256 particles per
group, and records σ, the standard deviation of the groups' log-evidence estimates.

Asymptotically SMC's log-evidence estimates are normal with variance σ² ≈ c / n for n
particles per group (Bérard, Del Moral & Doucet 2014); the mean of G groups then has
SE ≈ log(1 + √(expm1(σ²)/G)) ≈ σ/√G, so SE 0.3 would need G·n ≈ c / 0.3² particles in all,
whatever the split. The table gives n·σ² per run (constant if that law held) and the projection
from its median at the measured seconds per particle. Writes
``benchmarks/results/robot_arm_se_cost.md``.

Usage::

    python benchmarks/robot_arm_se_cost.py --workers 2        # about 22 min on 2 cores
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "benchmarks" / "results" / "robot_arm_se_cost.md"
TARGET_SE = 0.3
N_GROUPS = 4


def run(h: int, n_particles: int) -> dict:
    import pymc_evidence as pm_evidence
    from pymc_evidence.testing import ROBOT_ARM_LAYER, robot_arm_mlp

    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pm_evidence.EvidenceWarning)
        result = pm_evidence.thermodynamic(
            robot_arm_mlp(h), mlp_layers=ROBOT_ARM_LAYER, n_particles=n_particles,
            n_groups=N_GROUPS, max_groups=N_GROUPS, target_cess=0.95, random_seed=h,
            progressbar=False, cores=1,
        )
    return {
        "h": h, "n_particles": n_particles, "log_z": result.log_evidence, "se": result.se,
        "sigma": result.group_log_sd, "n_stages": result.n_stages,
        "seconds": time.perf_counter() - start,
    }


def summarise(rows: pd.DataFrame, wall: float, command: str) -> str:
    import pymc as pm

    rows = rows.sort_values(["h", "n_particles"]).reset_index(drop=True)
    rows["n_sigma2"] = rows["n_particles"] * rows["sigma"] ** 2
    rows["seconds_per_particle"] = rows["seconds"] / (N_GROUPS * rows["n_particles"])
    per_h = []
    for h, runs in rows.groupby("h"):
        largest = runs.iloc[-1]
        c = float(np.median(runs["n_sigma2"]))
        particles = c / TARGET_SE**2
        per_h.append({
            "h": h, "median_n_sigma2": c, "particles_for_se_0.3": particles,
            "cpu_hours_for_se_0.3": particles * largest["seconds_per_particle"] / 3600,
        })
    projection = pd.DataFrame(per_h)
    return "\n".join([
        "# What SE ≤ 0.3 nat costs on the robot-arm MLP",
        "",
        f"Written by `benchmarks/robot_arm_se_cost.py` on {datetime.date.today()} "
        f"(Python {platform.python_version()}, PyMC {pm.__version__}, {os.cpu_count()} cores); "
        f"command `{command}`, {wall / 60:.1f} min wall.",
        "",
        f"Chaining as in the curve: `mlp_layers`, {N_GROUPS} groups of n particles, "
        "`target_cess=0.95`, seed = h, one process per run. σ = SD of the groups' log "
        "evidences; SE as reported (lognormal law of the groups).",
        "",
        rows.to_markdown(index=False, floatfmt=".3g"),
        "",
        "Projection: SE ≈ σ/√G = √(c/(G·n)) with c = n·σ² (median over the runs), so SE 0.3 "
        "needs G·n = c/0.09 particles in all, at the largest run's seconds per particle:",
        "",
        projection.to_markdown(index=False, floatfmt=".3g"),
        "",
    ])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--particles", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    # Largest runs first, so that the workers finish together.
    jobs = sorted(((h, n) for h in args.hidden for n in args.particles),
                  key=lambda job: job[0] * job[1], reverse=True)
    start = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        rows = pd.DataFrame(list(pool.map(run, *zip(*jobs))))
    command = "python benchmarks/robot_arm_se_cost.py " + " ".join(argv)
    args.output.write_text(summarise(rows, time.perf_counter() - start, command.strip()))
    print(args.output.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
