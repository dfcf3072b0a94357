"""`infertune validate`: production-readiness drills against a server (soak, long tail, faults).

Modules: config (ValidateConfig, Drill, ValidateResult), target (the server: started or reached), load
(drill load on bench's worker processes), analysis (slope, drift and knee arithmetic), soak, longtail,
faults, report (validate.json / validate.html) and runner (`validate()`, the entry point).

`infertune.validate(cfg)` is the function (`infertune/_api.py` says how); this package stays a plain module.
"""

