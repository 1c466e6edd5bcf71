"""Datasets the victims train on: bundled (scikit-learn), synthetic and user files (npz, IDX)."""
