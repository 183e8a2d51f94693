"""Checkpoints: `io` reads and writes them safely, `paths` says which file is which, `registry` says what a
run's files may name, and `restore` loads a trained model with its run's config."""
