"""The audit engine (DESIGN §6): neighbouring fits, canaries, attacks, Clopper–Pearson ε bounds."""

#: where audit chunks run: joblib threads here, or a Dask cluster.
BACKENDS = ("local", "dask")
