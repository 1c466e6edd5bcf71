"""The run pipeline, scenario to report: `runner.run_scenario` (victim → oracle → attacks → scoring
→ verdict), the budget check it adds, and the run's outputs (report files, MLflow)."""
