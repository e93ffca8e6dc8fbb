"""Repository tools: the generated parts of README.md and docs/ kept in sync with reports/ (readme_sync), the
README's MLflow screenshots (mlflow_shots), and a run's settings followed through the code (settings_walk)."""
