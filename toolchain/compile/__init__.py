"""build: executing a BuildPlan step by step, from the sdist to a repaired wheel."""
