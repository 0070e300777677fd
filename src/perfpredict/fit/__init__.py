"""Analytic models fitted to measurements: rate model, speedup curve, GENIE comm penalty, MinIO cache model,
Horus interference."""

from perfpredict.fit.cache_model import (
    cached_throughput,
    demand_vector,
    hit_fraction,
    sensitivity_matrix,
)
from perfpredict.fit.comm import (
    CommFitError,
    CommModel,
    comm_penalty,
    fit_comm_penalty,
    holdout_error,
)
from perfpredict.fit.interference import (
    InterferenceModel,
    fit_interference,
    interference_points,
)
from perfpredict.fit.rate import Candidate, Prediction, RateModel, fit_rate_model, lat
from perfpredict.fit.speedup import (
    SpeedupCurve,
    SpeedupFitError,
    SpeedupPoint,
    fit_speedup_curve,
)

__all__ = [
    "Candidate", "CommFitError", "CommModel", "InterferenceModel", "Prediction", "RateModel", "SpeedupCurve", "SpeedupFitError",
    "SpeedupPoint", "cached_throughput", "comm_penalty", "demand_vector", "fit_comm_penalty", "fit_interference", "fit_rate_model",
    "fit_speedup_curve", "hit_fraction", "holdout_error", "interference_points", "lat", "sensitivity_matrix",
]
