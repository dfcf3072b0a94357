"""The one search loop behind `infertune tune`, for every model family.

capabilities -> candidates -> probe (successive halving) -> task refinement (e.g. batching against the
SLO) -> full interleaved rounds -> confirmation of the leaders -> decision, all inside one time budget.
Families plug in through `infertune.tuning.task.Task` (see `infertune.tasks.embedding` and
`infertune.tasks.causal_lm`)."""
