"""Typer CLI: one small file per command, no logic; each calls one library function."""
