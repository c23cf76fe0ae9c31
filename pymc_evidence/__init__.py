"""Model evidence p(D | M) for PyMC models: ``import pymc_evidence as pm_evidence``."""

from pymc_evidence.comparison import METHODS, compare
from pymc_evidence.density import ModelDensity, get_density
from pymc_evidence.estimators._tempering import power_ladder
from pymc_evidence.estimators.bic import bic
from pymc_evidence.estimators.bridge import bridge
from pymc_evidence.estimators.cmc import cmc
from pymc_evidence.estimators.laplace import laplace
from pymc_evidence.estimators.nested import nested
from pymc_evidence.estimators.thermodynamic import thermodynamic
from pymc_evidence.plots import (
    plot_cmc_path, plot_evidence, plot_nested, plot_stages, plot_trace_energy,
)
from pymc_evidence.results import (
    BICResult, BridgeResult, CMCResult, EvidenceResult, EvidenceWarning, LaplaceResult,
    NestedResult, ThermodynamicResult, load_result,
)
from pymc_evidence.symmetry import MLPLayer, mlp_symmetry

__version__ = "0.1.0"

__all__ = [
    "thermodynamic", "nested", "laplace", "bic", "bridge", "cmc", "compare", "METHODS",
    "power_ladder", "mlp_symmetry", "MLPLayer", "EvidenceResult", "ThermodynamicResult",
    "LaplaceResult", "BICResult", "BridgeResult", "CMCResult", "NestedResult", "EvidenceWarning",
    "load_result", "ModelDensity", "get_density", "plot_stages", "plot_trace_energy",
    "plot_evidence", "plot_cmc_path", "plot_nested",
]
