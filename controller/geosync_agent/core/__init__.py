"""The agent's core: its state as values and the decisions made from it, with no I/O.

Nothing here reads a clock, draws a random number, starts a thread, logs or talks to the outside: the
shell (the rest of ``geosync_agent``) passes in the time and randomness it needs and carries out what it
decides. An import-linter contract in ``pyproject.toml`` keeps it so. See
``docs/decisions/0001-sans-io-agent.md`` for the shape and what moves here next.

Its entry point is ``stepping.step(state, event, now) -> Stepped``: the shell feeds it events and carries out
the effects it returns. It covers the apply step's events today (a round's plans, and the plugin writes'
outcomes); the other steps of the round still call the core's decisions directly from the shell's parts
(``publishing.claim``, ``generations``, ``reports``, ``sealing``), and move behind the same entry as they
become events. The policy mirror's term has its own (``mirroring.step``).
"""
