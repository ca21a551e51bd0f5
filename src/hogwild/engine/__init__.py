"""Transport-free training: the round engine, its rules and the simulator (no gRPC here).

``rules`` (what a round may do: gates, who contributes), ``averaging`` (own changes shared
as an average), ``training`` (a worker's T HOGWILD! threads over its rows), ``round`` (one
worker's weights and its exchange arithmetic), ``topology`` (who hears whom, in hops) and
``simulate`` (W virtual workers in one process, deterministic for a seed). The cluster's
worker wraps :class:`hogwild.engine.round.RoundEngine`; the simulator drives the same object.
"""
