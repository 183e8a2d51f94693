"""Hyperparameter search (brisk-train -m hparams_search=optuna), the tune=lr|batch_size finders, sweep plots."""
