"""Recording runs: mlflow_tracker.py logs one run to MLflow (run_log.py: a finished run's params, metrics,
tags and dataset), sweep_parent.py opens the parent run of a multirun, finished_runs.py reads finished
runs back (run folders or an MLflow store) for the gate and the reports. The last step of the flow after
experiments/run/ and experiments/evaluate/; it reads run folders through experiments/run_folder/ and
imports nothing of experiments/run/ (tests/project/test_architecture.py).
"""
