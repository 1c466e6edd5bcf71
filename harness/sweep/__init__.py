"""Defense sweeps and their comparison: the grid and its MLflow runs (`grid`), one cell (`cell`),
where cells run (`executors`: processes or Ray), runs read back for `compare`."""
