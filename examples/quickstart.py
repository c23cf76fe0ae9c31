"""Quickstart: do two annotators label images the same way? (Barber's model-selection slides)

Two people label 20 images as happy / sad / normal. H_indep: each has their own label
probabilities (a Dirichlet(1,1,1) prior on each); H_same: both share one. The exact Bayes factor
p(D|indep) / p(D|same) is 12.87. Run with `make demo` or `python examples/quickstart.py`.
"""

import argparse

import numpy as np
import pymc as pm

import pymc_evidence as pm_evidence
from pymc_evidence.testing import ANNOTATOR_1, ANNOTATOR_2, annotators


def build_models():
    with pm.Model(name="indep") as indep:
        p1 = pm.Dirichlet("p1", np.ones(3))
        p2 = pm.Dirichlet("p2", np.ones(3))
        pm.Categorical("person_1", p1, observed=ANNOTATOR_1)
        pm.Categorical("person_2", p2, observed=ANNOTATOR_2)
    with pm.Model(name="same") as same:
        p = pm.Dirichlet("p", np.ones(3))
        pm.Categorical("person_1", p, observed=ANNOTATOR_1)
        pm.Categorical("person_2", p, observed=ANNOTATOR_2)
    return [indep, same]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="thermodynamic", choices=sorted(pm_evidence.METHODS))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    table = pm_evidence.compare(build_models(), method=args.method, random_seed=args.seed)
    print(table.to_string(float_format=lambda x: f"{x:.3f}"))
    _, exact = annotators()
    exact_log_bf = exact["indep"] - exact["same"]
    log_bf, dse = table.loc["same", "d_log_evidence"], table.loc["same", "dse"]
    distance = (f"{abs(log_bf - exact_log_bf) / dse:.1f} SE away" if dse > 0
                else f"{args.method} is an approximation without an SE")
    print(f"\nlog Bayes factor indep/same: {log_bf:.3f} ± {dse:.3f}; exact {exact_log_bf:.3f} "
          f"(Bayes factor 12.87): {distance}")


if __name__ == "__main__":
    main()
