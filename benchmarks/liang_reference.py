"""Importance-sampling references for the data of Liang's Table 3 (``liang_data()``).

The examples reproduce Liang's (2005) Table 3 on ``liang_mlp(H, *liang_data())`` with every
estimator; this gives each of the four models a reference that shares none of their failure
modes: importance sampling from a symmetrised t mixture fitted to posterior draws
(:mod:`_importance`, as in ``mlp_calibration.md``), 400,000 draws per estimate, each from its
own pilot fit (``thermodynamic`` without the effort check, mode search or ``target_se``: the
draws only shape the proposal). A model's estimates are pooled by inverse variance with an SE
of at least their spread.

Written: ``benchmarks/results/liang_reference.csv`` (the estimates of models and seeds not
rerun are kept) and ``.md``; the Table 3 estimates of
``examples/results/liang_mlp_table3.csv`` are compared with the references.

Usage::

    python benchmarks/liang_reference.py               # about 20 minutes on one core
    python benchmarks/liang_reference.py --models 4 --seeds 6 --first-seed 3   # 6 more of H4
    python benchmarks/liang_reference.py --summarise   # the table again, from the CSV
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pymc

import pymc_evidence as pm_evidence
from _importance import N_DRAWS, importance_log_evidence
from pymc_evidence.testing import liang_data, liang_mlp

RESULTS = Path(__file__).parent / "results"
CSV = RESULTS / "liang_reference.csv"
TABLE3 = Path(__file__).parents[1] / "examples" / "results" / "liang_mlp_table3.csv"
LAYER = pm_evidence.MLPLayer("z_in", bias="z_bias")


def estimates(h: int, seeds) -> list[dict]:
    model = liang_mlp(h, *liang_data())
    density = pm_evidence.get_density(model)
    rows = []
    for seed in seeds:
        begun = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pilot = pm_evidence.thermodynamic(model, mlp_layers=LAYER, effort_check=False,
                                              mode_search=False, target_se=None,
                                              random_seed=1000 + seed, progressbar=False,
                                              cores=1)
        posterior = {k: np.asarray(v).reshape((-1,) + np.shape(v)[2:])
                     for k, v in pilot.posterior.items()}
        log_z, se, ess = importance_log_evidence(density, LAYER, h,
                                                 density.from_constrained(posterior),
                                                 np.random.default_rng(seed))
        rows.append(dict(model=f"H{h}", seed=seed, log_z=log_z, se=se, ess=ess,
                         seconds=time.perf_counter() - begun))
        print(rows[-1], flush=True)
    return rows


def pooled(rows: pd.DataFrame) -> tuple[float, float]:
    """Inverse-variance mean, SE at least the estimates' spread (the SE of their mean)."""
    w = 1 / rows["se"] ** 2
    mean = float(np.sum(w * rows["log_z"]) / np.sum(w))
    spread = float(rows["log_z"].std(ddof=1) / np.sqrt(len(rows))) if len(rows) > 1 else 0.0
    return mean, max(float(np.sqrt(1 / np.sum(w))), spread)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, nargs="+", default=[1, 2, 3, 4],
                        choices=[1, 2, 3, 4], help="hidden units H")
    parser.add_argument("--seeds", type=int, default=2, help="estimates per model")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--summarise", action="store_true",
                        help="only compare Table 3 with the references in the CSV")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    command = " ".join(["python benchmarks/liang_reference.py", *argv])
    if not args.summarise:
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        new = pd.DataFrame([row for h in args.models for row in estimates(h, seeds)])
        if CSV.exists():  # estimates of other models and seeds are kept
            old = pd.read_csv(CSV)
            made = old.set_index(["model", "seed"]).index.isin(
                new.set_index(["model", "seed"]).index)
            new = pd.concat([old[~made], new]).sort_values(["model", "seed"])
        new.to_csv(CSV, index=False)
    table = pd.read_csv(CSV)
    fits = pd.read_csv(TABLE3)
    lines = []
    for name, rows in table.groupby("model"):
        ref, ref_se = pooled(rows)
        each = ", ".join(f"{r.log_z:.3f} ± {r.se:.3f} (ESS {r.ess:.0f})"
                         for r in rows.itertuples())
        cells = []
        for method in ("thermodynamic", "nested"):
            fit = fits[(fits["model"] == name) & (fits["method"] == method)]
            if fit.empty or not np.isfinite(fit["log_evidence"].iloc[0]):
                cells.append("")
                continue
            log_z, se = fit["log_evidence"].iloc[0], fit["se"].iloc[0]
            cells.append(f"{log_z:.2f} ± {se:.2f} ({(log_z - ref) / np.hypot(se, ref_se):+.1f})")
        lines.append(f"| {name} | {ref:.3f} ± {ref_se:.3f} | {each} | " + " | ".join(cells) + " |")
    text = f"""# References for Liang's Table 3 data

References written by `python benchmarks/liang_reference.py` (`--models`, `--seeds` and \
`--first-seed` add estimates of a model), this table by `{command}` on \
{datetime.date.today().isoformat()} (Python {platform.python_version()}, PyMC \
{pymc.__version__}). Models: \
`liang_mlp(H, *liang_data())`, the data of the examples' Table 3. Reference: importance \
sampling, {N_DRAWS:,} draws per estimate from a symmetrised t mixture fitted to a pilot fit's \
draws (`benchmarks/_importance.py`), each from its own pilot fit; a model's estimates pooled \
by inverse variance with an SE of at least their spread. Table 3's estimates \
(`examples/results/liang_mlp_table3.csv`) beside them, in brackets their distance to the \
reference in combined SE.

| model | reference | estimates | Table 3 thermodynamic | Table 3 nested |
|---|--:|---|--:|--:|
""" + "\n".join(lines) + "\n"
    (RESULTS / "liang_reference.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
