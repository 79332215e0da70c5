"""Scripts run by another environment's Python (a build or verify venv), not imported here."""
