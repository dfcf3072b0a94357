"""`infertune doctor`: what this host can run (checks.py) and what a pasted log means (explain.py)."""
