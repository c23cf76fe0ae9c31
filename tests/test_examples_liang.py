"""examples/liang_mlp.py in quick mode: the pipeline runs and writes sane tables and a figure."""

import numpy as np
import pandas as pd
import pytest
from _scripts import load_script  # tests/_scripts.py


def _load():
    return load_script("examples/liang_mlp.py", "liang_mlp_example")


@pytest.mark.slow  # compiles four MLP densities and their Hessians: minutes when not cached
def test_liang_example_quick(tmp_path):
    example = _load()
    with pytest.warns(UserWarning):  # short CMC stages: visiting frequencies are not yet flat
        output = example.main(quick=True, out=tmp_path, seed=0)
    table = pd.read_csv(tmp_path / "liang_mlp_table3.csv")
    assert (tmp_path / "liang_mlp.png").stat().st_size > 10_000
    assert not (tmp_path / "liang_mlp_table4.csv").exists()  # the sample-size study: full mode
    assert output["table4"].empty
    assert list(table.groupby("method").size().items()) == [
        ("cmc", 4), ("laplace", 4), ("liang2005", 4), ("nested", 4), ("thermodynamic", 4)
    ]
    for method, rows in table.groupby("method"):
        assert list(rows["model"]) == ["H1", "H2", "H3", "H4"]
        p = rows["probability"].to_numpy()
        assert np.all(np.isfinite(p)) and np.all(p >= 0)
        assert p.sum() == pytest.approx(1.0, abs=1e-6 if method != "liang2005" else 1e-3)
        if method != "liang2005":
            assert rows["per_ordering"].sum() == pytest.approx(1.0)
    cmc = table[table["method"] == "cmc"].set_index("model")
    # H1 (one unit) cannot fit the two-unit truth: every method puts almost nothing on it
    assert (table[table["model"] == "H1"]["probability"] < 0.05).all()
    assert 0 < cmc.loc["H2", "birth_acceptance"] <= 1 and 0 < cmc.loc["H3", "death_acceptance"] <= 1
    assert np.isnan(cmc.loc["H1", "death_acceptance"]) and np.isnan(cmc.loc["H4", "birth_acceptance"])


def test_liang_example_help():
    example = _load()
    assert "Table 3" in example.__doc__ and "--quick" in example.__doc__
    assert set(example.PAPER_TABLE4) == {10, 20, 25, 30, 40, 50}
    for row in example.PAPER_TABLE4.values():  # Liang's evidences are percentages summing to 100
        assert sum(row) == pytest.approx(100.0, abs=0.02)


def test_liang_example_keeps_the_rows_of_estimators_not_rerun(tmp_path):
    example = _load()
    with pytest.raises(ValueError, match=r"has no rows of \['thermodynamic', 'nested'\] to keep"):
        example.main(quick=True, out=tmp_path, methods=("laplace",))  # before any work
    with pytest.raises(ValueError, match="methods must be among"):
        example.main(quick=True, out=tmp_path, methods=("smc",))
    models = [f"H{h}" for h in example.HIDDEN]
    table = pd.DataFrame({"model": models * 3,
                          "method": ["laplace"] * 4 + ["nested"] * 4 + ["cmc"] * 4,
                          "probability": np.arange(12.0)})
    table.to_csv(tmp_path / "liang_mlp_table3.csv", index=False)
    kept = example._kept_rows(tmp_path / "liang_mlp_table3.csv", ["nested"])
    assert list(kept["method"]) == ["nested"] * 4 and list(kept["probability"]) == [4, 5, 6, 7]
    ordered = example._in_table_order(table)
    assert list(ordered["method"].unique()) == ["cmc", "nested", "laplace"]
    assert list(ordered["model"]) == models * 3


def test_liang_example_per_ordering_divides_each_evidence_by_the_units_orderings():
    example = _load()
    # equal evidences: one ordering of H units holds 1/H! of each, so H1 : H4 = 24 : 1
    p = example._per_ordering({f"H{h}": 0.25 for h in example.HIDDEN})
    weights = np.array([1, 1 / 2, 1 / 6, 1 / 24])
    np.testing.assert_allclose(list(p.values()), weights / weights.sum())
    # the ratio of two models' evidences changes by the ratio of their orderings
    p = example._per_ordering({"H1": 0.0, "H2": 0.6, "H3": 0.3, "H4": 0.1})
    assert p["H1"] == 0.0 and sum(p.values()) == pytest.approx(1.0)
    assert p["H3"] / p["H2"] == pytest.approx(0.5 / 3)
    assert p["H4"] / p["H3"] == pytest.approx(1 / 12)
