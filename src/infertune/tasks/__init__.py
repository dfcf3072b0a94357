"""Model families plugged into the one search loop (infertune.tuning): only what differs lives here."""
