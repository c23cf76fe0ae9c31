"""The example scripts' quick modes: they run, write their files, and get real numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from _scripts import ROOT, load_script  # tests/_scripts.py

EXAMPLES = ROOT / "examples"


def _load(name: str):
    return load_script(f"examples/{name}.py", f"example_{name}")


def test_coin_and_annotators_quick(tmp_path):
    script = _load("coin_and_annotators")
    summary = script.main(["--quick", "--out", str(tmp_path)])
    for name in ("coin_and_annotators.csv", "coin_and_annotators_runs.csv",
                 "coin_and_annotators.png"):
        assert (tmp_path / name).stat().st_size > 0
    # Every comparison: both models' log Z and the log Bayes factor (9 rows, thermodynamic).
    assert len(summary) == 9
    assert set(summary["method"]) == {"thermodynamic"}
    # Each estimate within 3 of its own SE of the exact value, and within a fixed 0.3 nats.
    z = (summary["estimate"] - summary["exact"]) / summary["se"]
    assert np.all(np.abs(z) < 3), summary[["quantity", "estimate", "se", "exact"]]
    assert np.all(np.abs(summary["estimate"] - summary["exact"]) < 0.3)
    # The exact values are the slides': Bayes factors 1.09, 0.109 and 12.87 to printed digits.
    bf = summary.dropna(subset=["exact_bayes_factor"]).set_index("case")
    assert bf.loc["coin 5H 2T", "exact_bayes_factor"] == pytest.approx(1.09, abs=0.005)
    assert bf.loc["coin 50H 20T", "exact_bayes_factor"] == pytest.approx(0.109, abs=0.0005)
    assert bf.loc["annotators", "exact_bayes_factor"] == pytest.approx(12.87, abs=0.005)


def test_coin_rerun_of_some_methods_needs_the_others_runs(tmp_path):
    """--methods keeps the other estimators' runs from --out: without them, an error naming
    what is missing, before anything runs."""
    script = _load("coin_and_annotators")
    with pytest.raises(ValueError, match=r"lacks runs of .*'annotators', 'bic'.*rerun"):
        script.main(["--methods", "thermodynamic", "--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())


def test_coin_model_evidence_is_the_grid_sum():
    """The inverse-CDF model's evidence equals the slides' discrete sum (printed values)."""
    script = _load("coin_and_annotators")
    printed = {(5, 2, "fair"): 0.00786, (5, 2, "biased"): 0.0072,
               (50, 20, "fair"): 1.5e-20, (50, 20, "biased"): 1.4e-19}
    for (heads, tails, name), value in printed.items():
        _, log_z = script.coin_model(script.COIN_PRIORS[name], heads, tails, name)
        digits = 3 if value == 0.00786 else 2
        assert float(f"{np.exp(log_z):.{digits - 1}e}") == pytest.approx(value, rel=1e-12)


def _check_robot_arm_table(table: pd.DataFrame, hidden: list[int]) -> None:
    assert table["h"].tolist() == hidden
    assert np.all(np.isfinite(table["log_z_thermodynamic"]))
    assert np.all(table["se_thermodynamic"] > 0)
    # (prediction − t)² = (prediction − f)² + 2 (prediction − f)(f − t) + (f − t)²: the test
    # error is the true function's error on the same test set ("floor") plus a non-negative
    # excess e plus a cross term of mean 0 and SD 2 √(e / M) over M scalar targets. e − 6 √(e/M)
    # is at least −9/M, so a 3-SD bound that holds however good the fit is: error ≥ floor − 9/M.
    # (The floor itself is 0.942 on MacKay's 400 test rows: 1.0 only in expectation.)
    margin = 9.0 / (2 * table["n_test"])
    for column in ("test_error_thermodynamic", "test_error_laplace_map"):
        values = table[column].dropna()
        assert np.all(values >= table.loc[values.index, "test_error_floor"] - margin[values.index])
    mackay = table["test_set"] == "mackay"
    assert np.allclose(table.loc[mackay, "test_error_floor"], 0.9423, atol=1e-4)


@pytest.mark.slow  # an MLP run: a minute or more on a 2-core machine
def test_robot_arm_quick_and_resume(tmp_path, capsys):
    script = _load("robot_arm")
    table = script.main(["--quick", "--hidden", "1", "--out", str(tmp_path)])
    _check_robot_arm_table(table, [1])
    # One tanh unit cannot draw the arm: the evidence and error are far from a good fit's
    # (two runs with other settings: -515.0 ± 0.4 and -515.6 ± 0.9; errors 260 and 263).
    assert -530 < table.loc[0, "log_z_thermodynamic"] < -500
    assert table.loc[0, "test_error_thermodynamic"] > 100
    for name in ("robot_arm_quick.csv", "robot_arm_quick_fig1.png", "robot_arm_quick_fig2.png"):
        assert (tmp_path / name).stat().st_size > 0
    # Resumable: a second call skips h already in the CSV and returns the same table.
    again = script.main(["--quick", "--hidden", "1", "--out", str(tmp_path)])
    assert "h=1: already in" in capsys.readouterr().out
    pd.testing.assert_frame_equal(again, table, check_dtype=False)


@pytest.mark.slow
def test_robot_arm_quick_with_laplace(tmp_path):
    script = _load("robot_arm")
    table = script.main(["--quick", "--restarts", "1", "--test-set", "generated",
                         "--out", str(tmp_path)])
    _check_robot_arm_table(table, [1, 2])
    assert np.all(np.isfinite(table["test_error_laplace_map"]))
    assert table["n_test"].tolist() == [1000, 1000]
    # Two units fit far better than one, by either method (h=1 ≈ -515, h=2 ≈ -364 nats).
    assert table.loc[1, "log_z_thermodynamic"] > table.loc[0, "log_z_thermodynamic"] + 50


def test_quickstart_prints_the_table_and_its_distance_from_the_exact_bayes_factor():
    """What the getting-started page shows (generated from this script when the docs build)."""
    import os
    import re
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(EXAMPLES / "quickstart.py")], check=True,
                          capture_output=True, text=True,
                          env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    lines = done.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["rank", "log_evidence", "se"]
    assert [line.split()[0] for line in lines[2:4]] == ["indep", "same"]
    distance = re.search(r"exact 2\.555 \(Bayes factor 12\.87\): ([\d.]+) SE away", lines[-1])
    assert distance and float(distance.group(1)) < 3
