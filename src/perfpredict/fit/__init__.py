"""Analytic models fitted to measurements (rate model today; comm penalty, speedup, cache model later)."""

from perfpredict.fit.rate import Candidate, Prediction, RateModel, fit_rate_model, lat

__all__ = ["Candidate", "Prediction", "RateModel", "fit_rate_model", "lat"]
