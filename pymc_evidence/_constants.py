"""Numbers more than one module relies on, defined once."""

import numpy as np

#: log(2π), the Gaussian normalising constant's log per dimension.
LOG_2PI = float(np.log(2 * np.pi))

#: Up to this many parameters the HMC metric is a dense covariance (``mass_matrix="auto"``);
#: beyond it a diagonal one, whose estimate and factorisation stay cheap.
DENSE_METRIC_MAX_DIM = 400
