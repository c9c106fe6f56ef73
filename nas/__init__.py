"""The search: configuration, reward, accuracy proxy, Ray Tune + Optuna driver, MLflow tracking."""
