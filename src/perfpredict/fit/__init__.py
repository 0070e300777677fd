"""Analytic models fitted to measurements: rate model, speedup curve, GENIE comm penalty (cache model later)."""

from perfpredict.fit.comm import (
    CommFitError,
    CommModel,
    comm_penalty,
    fit_comm_penalty,
    holdout_error,
)
from perfpredict.fit.rate import Candidate, Prediction, RateModel, fit_rate_model, lat
from perfpredict.fit.speedup import (
    SpeedupCurve,
    SpeedupFitError,
    SpeedupPoint,
    fit_speedup_curve,
)

__all__ = [
    "Candidate", "CommFitError", "CommModel", "Prediction", "RateModel", "SpeedupCurve", "SpeedupFitError",
    "SpeedupPoint", "comm_penalty", "fit_comm_penalty", "fit_rate_model", "fit_speedup_curve", "holdout_error",
    "lat",
]
