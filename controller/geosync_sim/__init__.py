"""A deterministic simulation of Pulsar regions that runs the real agent (issue 45).

``world`` models the brokers the agent depends on, ``ports`` implements the agent's ports over it,
``schedules`` draws a schedule of traffic, failovers, admin operations and faults from a seed, ``running``
drives the regions and their real ``Agent``s on virtual time, ``enacting`` carries the schedule's steps out in
the world, and ``checking`` judges what happened against the design's invariants without using any of the
agent's own logic. See docs/operations/simulation.md.
"""
