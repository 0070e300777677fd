"""MLflow logging of estimator training: one run per dataset, every target's model registered.

Params: dataset, device, rows, families, feature count, library versions. Metrics: each target's
grouped-CV MAPE / RMSLE per model kind, and the quantile coverage. Artifacts: the whole
``trained_models/<dataset>/`` folder. Each target's XGBoost point model is logged with MLflow's XGBoost
flavour and registered in the model registry as ``perfpredict-<dataset>-<target>`` (a new version per run).
"""

from __future__ import annotations

from perfpredict.estimators.train import TrainedSet
from perfpredict.tracking import _run, prepare

TRAIN_EXPERIMENT = "perfpredict-estimators"


def log_training(ts: TrainedSet, register: bool = True, experiment: str = TRAIN_EXPERIMENT) -> str:
    """Log ``ts`` as one MLflow run; return the run id."""
    import mlflow
    import xgboost as xgb

    prepare(experiment)
    meta = ts.metadata
    with _run(mlflow, f"train-{ts.name}", {"perfpredict.kind": "estimators", "device.kind": meta["device_kind"],
                                           "device.name": meta["device_name"]}) as run:
        mlflow.log_params({"dataset": ts.name, "dataset_sha256": meta["dataset_sha256"], "rows": meta["rows"],
                           "mode": meta.get("mode", "train"),
                           "families": ",".join(meta["families"]), "n_features": len(meta["feature_names"]),
                           **{f"version.{k}": v for k, v in meta["versions"].items()}})
        for tname, t in meta["targets"].items():
            ev = t.get("evaluation") or {}
            for kind, m in ev.get("family_cv", {}).items():
                mlflow.log_metrics({f"{tname}.family_cv.{kind}.mape": m["mape"],
                                    f"{tname}.family_cv.{kind}.rmsle": m["rmsle"]})
            for kind, m in ev.get("random_cv", {}).items():
                mlflow.log_metric(f"{tname}.random_cv.{kind}.mape", m["mape"])
            if "quantiles_family_cv" in ev:
                mlflow.log_metric(f"{tname}.quantile_coverage", ev["quantiles_family_cv"]["coverage"])
            if "interval_calibration" in ev:
                cal = ev["interval_calibration"]
                mlflow.log_metrics({f"{tname}.interval_log_margin": cal["margin"],
                                    f"{tname}.quantile_coverage_calibrated": cal["nested_family_cv"]["coverage"]})
            mlflow.log_metric(f"{tname}.train_mape", t["train_mape"])
            if "prior_coef" in t:  # that booster's input is the feature vector plus the prior's column
                mlflow.log_dict(t["prior_coef"], f"{tname}_prior.json")
                mlflow.set_tag(f"{tname}.input", f"feature_names + {t['prior_coef']['feature']} "
                                                 f"({tname}_prior.json)")
            if register and "point" in t["files"]:
                booster = xgb.Booster()
                booster.load_model(ts.out_dir / t["files"]["point"])
                mlflow.xgboost.log_model(booster, name=f"{tname}-xgboost",
                                         registered_model_name=f"perfpredict-{ts.name}-{tname}")
        mlflow.log_artifacts(str(ts.out_dir), artifact_path=f"trained_models/{ts.name}")
        return run.info.run_id
