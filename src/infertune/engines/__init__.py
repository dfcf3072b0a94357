"""Backends: one file per engine. Each answers four questions (see base.Backend)."""
