"""GeoSync's pure core.

Everything here is standard library only: no sockets, threads, clocks or logging setup. Positions,
range sets, origin coordinates, codecs for the wire formats we own, state machines and merge rules live
here so that they can be tested by tables and properties and shipped anywhere (agents, CLI, Spark
executors). Adapters translate the outside world into these types; the runtime applies the effects.
"""
