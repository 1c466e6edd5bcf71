"""Scheduled regression scans of an endpoint against a baseline MLflow run (`baseline`)."""
