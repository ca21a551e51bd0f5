"""`hogwild experiment`: the HOGWILD! paper's and the COS 518 comparisons from one command.

``plan`` turns the options into the list of runs (studies of threads x trainers, data size,
mini-batch size, regression, cluster workers), ``runner`` trains and measures each run,
``records`` writes runs.csv / runs.jsonl, ``plots`` draws the figures.
"""

from __future__ import annotations

from hogwild.experiment.plan import ExperimentOptions, RunSpec, build_plan

__all__ = ["ExperimentOptions", "RunSpec", "build_plan"]
