from pymc_evidence.bic import bic
from pymc_evidence.laplace import laplace
from pymc_evidence.symmetry import MLPLayer, mlp_symmetry
