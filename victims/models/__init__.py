"""The defender's models: builders for the architectures leakmeter trains, user model files, and
training (SGD/Adam, full-batch GD, L-BFGS, Opacus DP-SGD)."""
