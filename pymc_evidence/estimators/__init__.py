"""The estimators, one module each; ``pymc_evidence`` hands their functions on to users.

Each takes a model (or a list of models, ``cmc``) and returns an
:class:`~pymc_evidence.EvidenceResult`: ``thermodynamic`` (with its tempering in
``_tempering`` and its evidence maths in ``_stepping_stone``), ``laplace`` (MacKay's framework
in ``_mackay``), ``bic``, ``bridge`` and ``cmc`` (its PyMC-free core in ``_cmc_core``,
birth/death moves in ``_birth_death``).
"""
