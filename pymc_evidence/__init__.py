from pymc_evidence.bic import bic
from pymc_evidence.bridge import bridge
from pymc_evidence.cmc import cmc
from pymc_evidence.laplace import laplace
from pymc_evidence.symmetry import MLPLayer, mlp_symmetry
from pymc_evidence.compare import METHODS, compare
from pymc_evidence.density import ModelDensity, get_density
from pymc_evidence.results import EvidenceResult, EvidenceWarning, load_result
from pymc_evidence.thermodynamic import power_ladder, thermodynamic
from pymc_evidence.plots import plot_cmc_path, plot_evidence, plot_stages, plot_trace_energy
