"""The robot-arm MLP's evidence as the Laplace approximation summed over the basins an optimiser finds.

An indicator, not a reference: where importance sampling has no proposal that works (h = 4), it
says roughly where the evidence lies, from an argument that shares nothing with tempering.
It works on the collapsed model (``_collapsed_robot_arm``: the gamma precisions integrated out
analytically, the same evidence over the weights alone, d = 5h + 2). L-BFGS climbs
log p(w, D) from prior draws (``_basin_draws.climb``); each end point within ``--within`` nats
of the best whose Hessian of −log p(w, D) is positive definite and that is no copy (under the
units' 2^h h! sign flips and permutations) of a basin kept before is a basin b, and

    log Z ≈ logsumexp_b [ log p(w_b, D) + (d/2) log 2π − ½ log det H_b + log n_b ],

n_b the distinct copies of w_b (2^h h! unless some symmetry fixes it). The Laplace term of a
basin is off where the basin is far from Gaussian, and basins the climbs never reach are
missing, so the sum can land on either side of the evidence; h = 1, 2 and 3, whose
importance-sampling references are in ``mlp_calibration.md``, show by how much. Each seed's climbs
are summed on their own, so the spread between seeds shows what more climbs would add.
Writes ``benchmarks/results/robot_arm_basin_laplace.md`` and ``.csv`` (one row per basin),
keeping the rows of earlier invocations with other (h, climbs, seed).

Usage::

    python benchmarks/robot_arm_basin_laplace.py --hidden 1 2 3 4 --climbs 150 --seeds 2
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import logsumexp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _basin_draws import _hessian, climb  # noqa: E402
from _collapsed_robot_arm import CollapsedRobotArm  # noqa: E402

OUTPUT = Path(__file__).resolve().parent / "results" / "robot_arm_basin_laplace"
#: Importance-sampling references of the collapsed model (``mlp_calibration.md``).
REFERENCE = {1: -514.512, 2: -359.336, 3: -52.619}


def _is_copy(point, copies_of_kept, tolerance: float) -> bool:
    return any(np.min(np.sum((copies - point) ** 2, axis=1)) < tolerance
               for copies in copies_of_kept)


def basins(model, optima, within: float) -> list[dict]:
    """The distinct basins among ``optima`` (best first) within ``within`` nats of the best,
    each with its Laplace log evidence and number of distinct copies."""
    group = model.symmetry_group()
    best, kept, copies_of_kept = optima[0][0], [], []
    for value, point in optima:
        if value < best - within:
            break
        scale = 1.0 + point @ point
        if _is_copy(point, copies_of_kept, 1e-4 * scale):
            continue
        eigenvalues = np.linalg.eigvalsh(_hessian(model, point))
        if eigenvalues.min() <= 0:  # a saddle or a flat ridge is not a basin
            continue
        copies = np.stack([sign * point[index] for index, sign in group])
        distinct = []
        for copy in copies:
            if all(np.sum((copy - other) ** 2) > 1e-6 * scale for other in distinct):
                distinct.append(copy)
        laplace = (value + model.dim / 2 * np.log(2 * np.pi)
                   - 0.5 * np.sum(np.log(eigenvalues)))
        kept.append(dict(log_joint=value, laplace=laplace, copies=len(distinct),
                         smallest_eigenvalue=eigenvalues.min()))
        copies_of_kept.append(copies)
    return kept


def run(hidden, climbs: int, seeds: int, within: float) -> pd.DataFrame:
    rows = []
    for h in hidden:
        model = CollapsedRobotArm(h)
        for seed in range(seeds):
            start = time.perf_counter()
            rng = np.random.default_rng([h, seed])
            optima = climb(model, model.prior_draws(rng, climbs), maxiter=20000, gtol=1e-8)
            seconds = time.perf_counter() - start
            for rank, basin in enumerate(basins(model, optima, within)):
                rows.append(dict(h=h, dim=model.dim, seed=seed, climbs=climbs, rank=rank,
                                 **basin, seconds=seconds))
            print(f"h={h} seed {seed}: {seconds:.0f} s", flush=True)
    return pd.DataFrame(rows)


def merged(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the CSV's rows of every other (h, climbs, seed)."""
    path = OUTPUT.with_suffix(".csv")
    if not path.exists():
        return rows
    earlier = pd.read_csv(path)
    ran = set(zip(rows["h"], rows["climbs"], rows["seed"]))
    earlier = earlier[[key not in ran for key in
                       zip(earlier["h"], earlier["climbs"], earlier["seed"])]]
    return pd.concat([earlier, rows], ignore_index=True).sort_values(
        ["h", "climbs", "seed", "rank"], ignore_index=True)


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (h, climbs, seed): basins, the best basin's term, the sum over basins."""
    out = []
    for (h, climbs, seed), basin in rows.groupby(["h", "climbs", "seed"], sort=True):
        terms = basin["laplace"] + np.log(basin["copies"])
        out.append(dict(h=h, d=int(basin["dim"].iloc[0]), seed=seed, climbs=climbs,
                        basins=len(basin),
                        best_log_joint=basin["log_joint"].max(), best_basin=terms.iloc[0],
                        sum_over_basins=logsumexp(terms), reference=REFERENCE.get(h, np.nan),
                        seconds=basin["seconds"].iloc[0]))
    return pd.DataFrame(out)


def write(rows: pd.DataFrame, command: str, within: float) -> None:
    rows.to_csv(OUTPUT.with_suffix(".csv"), index=False, float_format="%.4f")
    table = summary(rows)
    lines = [
        "# The robot-arm MLP: the Laplace approximation summed over the basins an optimiser finds",
        "",
        f"Written by `{command}` on {datetime.date.today()} (Python "
        f"{platform.python_version()}, one process; the seconds depend on what else ran); "
        "rows of other (h, climbs, seed) are kept from earlier invocations.",
        "",
        "The collapsed model (precisions integrated out); L-BFGS from prior draws; per seed, "
        "its climbs' distinct basins (up to the units' symmetries, positive definite Hessian, "
        f"within {within:g} nats of the best), each basin's Laplace log evidence plus the log of its "
        "distinct copies ('best basin': that of the highest log p(w, D); 'sum': logsumexp over the "
        "basins). Reference: importance sampling of the collapsed model (`mlp_calibration.md`); "
        "none at h = 4. Per basin: `robot_arm_basin_laplace.csv`.",
        "",
        "| h | d | seed | climbs | basins | best log p(w, D) | best basin | sum over basins "
        "| reference | s |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in table.itertuples():
        reference = "" if np.isnan(r.reference) else f"{r.reference:.3f}"
        lines.append(f"| {r.h} | {r.d} | {r.seed} | {r.climbs} | {r.basins} | "
                     f"{r.best_log_joint:.2f} | {r.best_basin:.2f} | {r.sum_over_basins:.2f} | "
                     f"{reference} | {r.seconds:.0f} |")
    OUTPUT.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--climbs", type=int, default=150, help="prior draws climbed per seed")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--within", type=float, default=20.0,
                        help="basins within this many nats of the best end point")
    args = parser.parse_args(argv)
    rows = merged(run(args.hidden, args.climbs, args.seeds, args.within))
    write(rows, "python benchmarks/robot_arm_basin_laplace.py " + " ".join(
        argv if argv is not None else sys.argv[1:]), args.within)


if __name__ == "__main__":
    main()
